"""Placement and map strings on the vectors shared by all three clients (test/conformance/placement.json)."""
import json
import pathlib
import unittest

from lockd.errors import LockRequestError
from lockd.shard import format_address, parse_server_map, place_index, weight

VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[3] / "test" / "conformance" / "placement.json").read_text(encoding="utf-8"))


class Placement(unittest.TestCase):
    def test_weights(self):
        self.assertTrue(VECTORS["weights"])
        for v in VECTORS["weights"]:
            self.assertEqual(weight(v["shard"], v["lock"]).hex(), v["weight"], v)

    def test_placements(self):
        self.assertTrue(VECTORS["placements"])
        for v in VECTORS["placements"]:
            self.assertEqual(v["shards"][place_index(v["shards"], v["lock"])], v["shard"], v)

    def test_maps(self):
        self.assertTrue(VECTORS["maps"])
        for v in VECTORS["maps"]:
            if "error" in v:
                with self.assertRaises(LockRequestError, msg=v):
                    parse_server_map(v["servers"])
                continue
            m = parse_server_map(v["servers"])
            got = {"generation": m.generation, "shards": [{"name": s.name, "addresses": [format_address(a) for a in s.addresses]} for s in m.shards]}
            self.assertEqual(got, {"generation": v["generation"], "shards": v["shards"]}, v["servers"])
