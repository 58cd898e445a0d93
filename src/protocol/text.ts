/**
 * Names and owners must be valid UTF-8 with no control characters
 * (U+0000-U+001F, U+007F-U+009F). One pass over the bytes checks both:
 * well-formedness per RFC 3629 (no overlong forms, no surrogates, nothing
 * past U+10FFFF), and the C0/DEL bytes and the C1 range, which UTF-8 spells
 * C2 80..C2 9F.
 */

export const TextCheck = { OK: 0, INVALID_UTF8: 1, CONTROL: 2 } as const;
export type TextCheck = (typeof TextCheck)[keyof typeof TextCheck];

export function checkText(bytes: Uint8Array, offset: number, length: number): TextCheck {
  const end = offset + length;
  let i = offset;
  while (i < end) {
    const b = bytes[i]!;
    if (b < 0x80) {
      if (b < 0x20 || b === 0x7f) return TextCheck.CONTROL;
      i++;
      continue;
    }
    let need: number;
    let min: number; // smallest allowed second byte
    let max: number; // largest allowed second byte
    if (b >= 0xc2 && b <= 0xdf) {
      need = 1;
      min = 0x80;
      max = 0xbf;
    } else if (b >= 0xe0 && b <= 0xef) {
      need = 2;
      min = b === 0xe0 ? 0xa0 : 0x80; // no overlong
      max = b === 0xed ? 0x9f : 0xbf; // no surrogates
    } else if (b >= 0xf0 && b <= 0xf4) {
      need = 3;
      min = b === 0xf0 ? 0x90 : 0x80; // no overlong
      max = b === 0xf4 ? 0x8f : 0xbf; // nothing past U+10FFFF
    } else {
      return TextCheck.INVALID_UTF8;
    }
    if (i + need >= end) return TextCheck.INVALID_UTF8; // truncated sequence
    const second = bytes[i + 1]!;
    if (second < min || second > max) return TextCheck.INVALID_UTF8;
    for (let k = 2; k <= need; k++) {
      const next = bytes[i + k]!;
      if (next < 0x80 || next > 0xbf) return TextCheck.INVALID_UTF8;
    }
    if (b === 0xc2 && second <= 0x9f) return TextCheck.CONTROL; // C1: U+0080..U+009F
    i += need + 1;
  }
  return TextCheck.OK;
}

// ignoreBOM: a default decoder drops a leading U+FEFF, and names are compared
// byte for byte ("\uFEFFjobs" is not "jobs", and "\uFEFF" is not empty).
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/** Decode bytes already checked by checkText. Copies: the string never pins the chunk. */
export function decodeText(bytes: Uint8Array, offset: number, length: number): string {
  return decoder.decode(bytes.subarray(offset, offset + length));
}
