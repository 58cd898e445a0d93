/**
 * lockd status's role line (src/cli/status.ts roleText): a standby names
 * the service's epoch and the active it sees, as its /readyz gave them.
 */
import { expect, test } from "bun:test";
import { roleText } from "../../src/cli/status.ts";

test("a standby's line names the active it sees; no active (released or absent) says so; an active's line is unchanged", () => {
  expect(roleText({ role: "standby", epoch: 2, active: "db1/pid-42/9f3a01bc", service: "pay" })).toBe(
    "service pay: standby, epoch 2, active db1/pid-42/9f3a01bc (a standby serves no locks: ask the active)\n",
  );
  expect(roleText({ role: "standby", epoch: 2, active: null, service: "pay" })).toBe(
    "service pay: standby, epoch 2, no active (the row is released or absent) (a standby serves no locks)\n",
  );
  expect(roleText({ role: "active", epoch: 3, active: "db1/pid-42/9f3a01bc", service: "pay" })).toBe("service pay: active, epoch 3\n");
  // An older lockd's /readyz names no active: the line says nothing about one.
  expect(roleText({ role: "standby", epoch: 0, service: "pay" })).toBe("service pay: standby, epoch 0 (a standby serves no locks: ask the active)\n");
  expect(roleText({})).toBe("");
});
