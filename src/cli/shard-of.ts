/** `lockd shard-of NAME...`: the shard each lock name belongs to in a server map, for scripts. */
import { formatAddressList } from "../net/address.ts";
import { parseOptions } from "./options/argv.ts";
import { SHARD_OF_OPTIONS } from "./options/run-options.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { placementOf } from "../shard/placement.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";

export const SHARD_OF_HELP = `Usage: lockd shard-of [options] NAME...

Prints the shard each lock NAME belongs to in the server map (--server, else
LOCKD_SERVER), one line per name: the shard's name, then with --addresses
its servers. The placement is the clients' own (rendezvous hashing over the
shard names), computed here: no server is asked.

Options (flag, then environment, then default):
${optionsHelp(SHARD_OF_OPTIONS)}
${helpRow("--addresses", "also print the shard's servers: NAME SHARD HOST:PORT,...")}
${helpRow("-h, --help", "this text")}

Exit codes: 0 printed; 64 bad options, no NAME, or a map without named shards.
`;

export function shardOf(argv: readonly string[], env: Record<string, string | undefined>, out = process.stdout): number {
  const parsed = parseOptions(SHARD_OF_OPTIONS, argv, env, { "--addresses": "addresses" });
  if (parsed.help) {
    out.write(SHARD_OF_HELP);
    return ExitCode.OK;
  }
  if (parsed.positionals.length === 0) throw new CliError("give at least one lock NAME", ExitCode.USAGE);
  const map = parsed.options.server;
  const placement = placementOf(map);
  if (placement === null) {
    throw new CliError("the server map is a plain address list (one unnamed shard): give --server alpha=HOST:PORT;beta=HOST:PORT (or LOCKD_SERVER)", ExitCode.USAGE);
  }
  const withAddresses = parsed.switches.has("addresses");
  for (const name of parsed.positionals) {
    const shard = map.shards[placement.indexOf(name)]!;
    out.write(withAddresses ? `${name} ${shard.name} ${formatAddressList(shard.addresses)}\n` : `${shard.name}\n`);
  }
  return ExitCode.OK;
}
