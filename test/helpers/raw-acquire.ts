/**
 * Raw ACQUIRE bytes with any field set by hand, including values
 * encodeAcquire refuses (version 2, lease 0, a name_length that lies), for
 * the tests of validation.
 */
import { FrameType } from "../../src/protocol/index.ts";

export interface RawAcquireFields {
  version?: number;
  options?: number;
  lease?: number;
  /** Defaults to the real length of `name`. */
  nameLength?: number;
  name?: number[];
  owner?: number[];
}

/** The ACQUIRE body (no header). Name defaults to "a", owner to empty. */
export function rawAcquireBody(fields: RawAcquireFields): Uint8Array {
  const name = fields.name ?? [0x61];
  const owner = fields.owner ?? [];
  const bytes = new Uint8Array(8 + name.length + owner.length);
  const view = new DataView(bytes.buffer);
  bytes[0] = fields.version ?? 1;
  bytes[1] = fields.options ?? 0;
  view.setUint32(2, fields.lease ?? 1000);
  view.setUint16(6, fields.nameLength ?? name.length);
  bytes.set(name, 8);
  bytes.set(owner, 8 + name.length);
  return bytes;
}

/** The whole ACQUIRE frame, header included, as bytes to write. */
export function rawAcquireFrame(fields: RawAcquireFields): number[] {
  const body = rawAcquireBody(fields);
  return [FrameType.ACQUIRE, 0, body.length >> 8, body.length & 0xff, ...body];
}
