/** The options section of `--help` texts, laid out from the option tables. */
import type { OptionTable } from "./argv.ts";
import { placeholderOf } from "./text.ts";

/** The column where a help row's text starts. */
const HELP_COLUMN = 32;

/** One row of a help text, aligned with optionsHelp's rows: `helpRow("-h, --help", "this text")`. */
export function helpRow(left: string, text: string): string {
  const lead = `  ${left}`;
  return lead.length < HELP_COLUMN ? `${lead.padEnd(HELP_COLUMN)} ${text}` : `${lead}\n${" ".repeat(HELP_COLUMN + 1)}${text}`;
}

/** Said first in the options of a command that takes a duration. */
export const DURATION_NOTE = "  (a DURATION names its unit: 250ms, 5s, 1.5s, 2m, 1h, 1d; a bare number is refused)";

/** The options section of a --help text, generated from the table. */
export function optionsHelp(table: OptionTable): string {
  const specs = Object.values(table);
  const rows = specs.map((spec) => {
    const left = `  ${spec.flag} ${placeholderOf(spec)}`;
    const extra = [spec.default !== undefined ? `default ${spec.default}` : "", spec.env !== undefined ? `env ${spec.env}` : ""]
      .filter(Boolean)
      .join("; ");
    // A flag too long for the column gets its text on the next line, aligned.
    return helpRow(left.slice(2), `${spec.help}${extra ? ` (${extra})` : ""}`);
  });
  if (specs.some((spec) => placeholderOf(spec).split("|").includes("DURATION"))) rows.unshift(DURATION_NOTE);
  return rows.join("\n");
}
