/**
 * The worked schedules in the docs (protocol.md section 8.3's table,
 * writing-a-client.md section 4's timeline) replayed through the client's
 * own schedule functions: every heartbeat goes out when the smoothedRTT rule
 * says, and every give-up and expiry time is what the pessimism rule and
 * the lease give.
 */
import { expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { clientTimeout, heartbeatInterval, smoothRtt } from "../../src/client/schedule.ts";

const ROOT = resolve(import.meta.dir, "../..");

async function section(page: string, start: string, end: string): Promise<string> {
  const text = await Bun.file(join(ROOT, "docs", page)).text();
  const from = text.indexOf(start);
  const to = text.indexOf(end, from + 1);
  if (from < 0 || to < 0) throw new Error(`${page}: no section between "${start}" and "${end}"`);
  return text.slice(from, to);
}

const num = (text: string): number => Number(text.replaceAll(",", ""));

test("protocol.md 8.3: the example table follows the schedule of 8.2 and the pessimism rule", async () => {
  const text = await section("protocol.md", "### 8.3", "### 8.4");
  const lease = num(/lease ([\d,]+) ms/.exec(text)![1]!);
  const rows = [...text.matchAll(/^\|\s*([\d,]+)\s*\|([^|]*)\|\s*([\d,]*)\s*\|\s*([\d,]*)\s*\|$/gm)].map((m) => ({
    t: num(m[1]!),
    event: m[2]!.trim(),
    confirmed: m[3] === "" ? undefined : num(m[3]!),
    givesUp: m[4] === "" ? undefined : num(m[4]!),
  }));
  expect(rows.length).toBeGreaterThanOrEqual(5);
  let lastSend = NaN;
  let lastReply = NaN;
  let smoothed: number | undefined;
  let confirmed: number | undefined;
  const checked: string[] = [];
  for (const row of rows) {
    if (row.event.startsWith("sends ACQUIRE")) lastSend = row.t;
    else if (row.event.startsWith("sends HEARTBEAT")) {
      expect({ event: row.event, t: row.t }).toEqual({ event: row.event, t: lastReply + heartbeatInterval(lease, smoothed!) });
      lastSend = row.t;
      checked.push("heartbeat");
    } else if (row.event.includes("reply arrives")) {
      smoothed = smoothRtt(smoothed, row.t - lastSend);
      lastReply = row.t;
      confirmed = lastSend;
    } else if (row.event.startsWith("no newer answer")) {
      expect(row.t).toBe(confirmed! + clientTimeout(lease));
      checked.push("give up");
    } else throw new Error(`unknown event in the table: ${row.event}`);
    if (row.confirmed !== undefined) {
      expect({ t: row.t, confirmed: row.confirmed, givesUp: row.givesUp }).toEqual({ t: row.t, confirmed: confirmed!, givesUp: confirmed! + clientTimeout(lease) });
    }
  }
  expect(checked).toEqual(["heartbeat", "heartbeat", "give up"]);
  // "ends the session no earlier than N": the confirmed send plus a whole lease.
  expect(num(/no earlier than ([\d,]+)/.exec(text)![1]!)).toBe(confirmed! + lease);
});

test("writing-a-client.md 4: the timeline follows the schedule of section 3 and the pessimism rule", async () => {
  const text = await section("writing-a-client.md", "## 4.", "## 5.");
  const lease = num(/lease ([\d,]+) ms/.exec(text)![1]!);
  let smoothed: number | undefined = num(/smoothedRTT ([\d,]+) ms/.exec(text)![1]!);
  let lastSend = NaN;
  let lastReply = NaN;
  let lastSeen = NaN;
  let confirmed = NaN;
  const checked: string[] = [];
  for (const m of text.matchAll(/^ +t = ([\d,]+) +(.*)$/gm)) {
    const t = num(m[1]!);
    const event = m[2]!;
    if (/^client sends HEARTBEAT/.test(event)) lastSend = t;
    else if (/^server receives it/.test(event)) lastSeen = t;
    else if (/^reply arrives/.test(event)) {
      smoothed = smoothRtt(smoothed, t - lastSend);
      lastReply = t;
      confirmed = lastSend;
    } else if (/^next HEARTBEAT sent/.test(event)) {
      expect({ event, t }).toEqual({ event, t: lastReply + heartbeatInterval(lease, smoothed) });
      const stated = /interval ([\d,]+) ms/.exec(event);
      if (stated !== null) expect(num(stated[1]!)).toBe(heartbeatInterval(lease, smoothed));
      checked.push("heartbeat");
    } else if (/the client gives the lock up/.test(event)) {
      expect(t).toBe(confirmed + clientTimeout(lease));
      checked.push("give up");
    } else if (/the server expires the session/.test(event)) {
      expect(t).toBe(lastSeen + lease);
      checked.push("expiry");
    } else throw new Error(`unknown event in the timeline: ${event}`);
  }
  expect(checked).toEqual(["heartbeat", "give up", "expiry"]);
});
