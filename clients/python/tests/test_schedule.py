"""The reconnect pacing on the vectors shared by all three clients (test/conformance/backoff.json)."""
import json
import pathlib
import unittest

from lockd.schedule import PAUSE_BOUNDS, PauseBounds, reconnect_pause

VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[3] / "test" / "conformance" / "backoff.json").read_text(encoding="utf-8"))


def bounds_of(b: dict) -> PauseBounds:
    """The vector file's bounds (ms) as this client's (seconds)."""
    return PauseBounds(b["nextAddressMinMs"] / 1000, b["nextAddressMaxMs"] / 1000, b["backoffBaseMs"] / 1000, b["backoffMaxMs"] / 1000)


class ReconnectPause(unittest.TestCase):
    def test_first_set_is_the_defaults(self):
        self.assertTrue(VECTORS["sets"])
        self.assertEqual(bounds_of(VECTORS["sets"][0]["bounds"]), PAUSE_BOUNDS)

    def test_vectors(self):
        for s in VECTORS["sets"]:
            self.assertTrue(s["vectors"], s["note"])
            bounds = bounds_of(s["bounds"])
            for v in s["vectors"]:
                got = reconnect_pause(v["failures"], v["addresses"], v["draw"], bounds)
                # Seconds here, ms in the file: equal to well within a nanosecond.
                self.assertAlmostEqual(got * 1000, v["pauseMs"], delta=1e-9, msg=(s["note"], v))

    def test_rounds_past_a_float_exponent(self):
        # 2 ** 1100 does not fit a float: the doubling stops at the cap instead.
        self.assertEqual(reconnect_pause(1100, 1, 0.0), 1.0)
        self.assertEqual(reconnect_pause(10**9, 1, 0.5), 1.5)


if __name__ == "__main__":
    unittest.main()
