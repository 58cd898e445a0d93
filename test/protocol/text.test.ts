import { describe, expect, test } from "bun:test";
import { TextCheck, checkText } from "../../src/protocol/index.ts";

const check = (bytes: number[]) => checkText(new Uint8Array(bytes), 0, bytes.length);
const utf8 = (s: string) => Array.from(new TextEncoder().encode(s));

describe("checkText", () => {
  test("accepts well-formed text of every sequence length", () => {
    for (const s of ["jobs/nightly", "é", "ü-𝄞-€", "日本語/ロック", "\u{10FFFF}", "\u00A0", "\uFFFD"]) {
      expect(check(utf8(s))).toBe(TextCheck.OK);
    }
  });
  test("C0, DEL and C1 controls are refused", () => {
    for (const cp of [0x00, 0x09, 0x1f, 0x7f, 0x80, 0x85, 0x9f]) {
      expect(check(utf8(String.fromCodePoint(cp)))).toBe(TextCheck.CONTROL);
    }
    expect(check(utf8("\u00A0"))).toBe(TextCheck.OK); // first code point after C1
  });
  test("malformed UTF-8 is refused", () => {
    const bad = [
      [0x80], // lone continuation
      [0xc3], // truncated
      [0xe2, 0x82], // truncated
      [0xc0, 0xaf], // overlong
      [0xe0, 0x80, 0xaf], // overlong
      [0xf0, 0x80, 0x80, 0xaf], // overlong
      [0xed, 0xa0, 0x80], // surrogate
      [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
      [0xf5, 0x80, 0x80, 0x80],
      [0xff],
      [0xe2, 0x28, 0xa1], // bad continuation
    ];
    for (const bytes of bad) expect(check(bytes)).toBe(TextCheck.INVALID_UTF8);
  });
  test("agrees with a strict decoder on random bytes", () => {
    const strict = new TextDecoder("utf-8", { fatal: true });
    let seed = 12345;
    const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff;
    for (let n = 0; n < 20000; n++) {
      const bytes = new Uint8Array(1 + (n % 6));
      for (let i = 0; i < bytes.length; i++) bytes[i] = rand() | (n % 3 === 0 ? 0x80 : 0);
      let text: string | null = null;
      try {
        text = strict.decode(bytes);
      } catch {}
      const result = checkText(bytes, 0, bytes.length);
      // Invalid text is refused (as CONTROL if a control byte comes first: both are BAD_REQUEST).
      if (text === null) expect(result).not.toBe(TextCheck.OK);
      else expect(result).toBe(/[\u0000-\u001f\u007f-\u009f]/.test(text) ? TextCheck.CONTROL : TextCheck.OK);
    }
  });
});
