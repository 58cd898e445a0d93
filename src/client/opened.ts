/**
 * A claim's first connection, opened before the claim existed: `lockd run`
 * connects and sends its ACQUIRE before the client library is loaded (its
 * fast start, src/cli/run-fast.ts), and hands the connection to a Claim
 * (Claim.adopt) only once something needs the claim's rules: any answer but
 * an immediate grant, a failed connect, the end of the connection, the time
 * of the first heartbeat. Until then every event is recorded with its time
 * (performance.now(), the clock Claim gives its machine), and the machine is
 * told them at those times, so it decides exactly as if the claim had
 * opened the connection itself: the ACQUIRE counts as sent when it was, and
 * a reply as read when it was.
 */
import { connectBun } from "./bun-transport.ts";
import type { Address, Transport } from "./transport.ts";

/** What happens on the connection, with the time it happened. */
export interface OpenedListener {
  /** The connect succeeded and the ACQUIRE was written at `at`. */
  open(at: number, transport: Transport): void;
  connectFailed(at: number, error: unknown): void;
  /** Bytes from the server; the view is valid only during the call. */
  data(at: number, chunk: Uint8Array): void;
  closed(at: number, error: Error | undefined): void;
}

/** A recorded event, and what it is, for the listener that watches the recording. */
export type OpenedEvent =
  | { readonly kind: "open"; readonly at: number; readonly transport: Transport }
  | { readonly kind: "connect-failed"; readonly at: number; readonly error: unknown }
  | { readonly kind: "data"; readonly at: number; readonly bytes: Uint8Array }
  | { readonly kind: "closed"; readonly at: number; readonly error: Error | undefined };

export class OpenedConnection {
  /** Everything that happened, in order, until `attach`. */
  private readonly events: OpenedEvent[] = [];
  private listener: OpenedListener | null = null;
  private abandoned = false;
  /** The connection once open; null before, after a failed connect, and once closed. */
  transport: Transport | null = null;
  /** Told of each event as it is recorded (not after `attach`): the fast start's own watch. */
  onEvent: (event: OpenedEvent) => void = () => {};

  private constructor(
    /** When the claim started: before the connect was asked for. */
    readonly startedAt: number,
    readonly address: Address,
    /** The ACQUIRE written on the connection once open: the claim's own frame, byte for byte. */
    readonly frame: Uint8Array,
  ) {}

  /** Connect to `address` (plain TCP) and write `frame` once open. */
  static open(address: Address, frame: Uint8Array): OpenedConnection {
    const opened = new OpenedConnection(performance.now(), address, frame);
    connectBun(address, undefined, {
      data: (chunk) => opened.event({ kind: "data", at: performance.now(), bytes: chunk }),
      closed: (error) => {
        opened.transport = null;
        opened.event({ kind: "closed", at: performance.now(), error });
      },
    }).then(
      (transport) => {
        if (opened.abandoned) {
          void transport.close();
          return;
        }
        opened.transport = transport;
        // As a Claim does: the time is taken, then the frame written (ClaimMachine.connected, send).
        const at = performance.now();
        transport.write(frame);
        opened.event({ kind: "open", at, transport });
      },
      (error: unknown) => opened.event({ kind: "connect-failed", at: performance.now(), error }),
    );
    return opened;
  }

  /** Hand the connection over: `listener` is told every recorded event, in order, then each new one as it happens. */
  attach(listener: OpenedListener): void {
    this.listener = listener;
    for (const event of this.events.splice(0)) deliver(listener, event);
  }

  /** Nobody will attach: close the connection now, or as soon as it opens. */
  abandon(): void {
    this.abandoned = true;
    this.listener = null;
    this.onEvent = () => {};
    const transport = this.transport;
    this.transport = null;
    if (transport !== null) void transport.close();
  }

  private event(event: OpenedEvent): void {
    if (this.abandoned) return;
    if (this.listener !== null) {
      deliver(this.listener, event);
      return;
    }
    // A chunk's view is valid only during the call: the recording keeps a copy.
    const kept = event.kind === "data" ? { ...event, bytes: event.bytes.slice() } : event;
    this.events.push(kept);
    this.onEvent(kept);
  }
}

function deliver(listener: OpenedListener, event: OpenedEvent): void {
  switch (event.kind) {
    case "open":
      listener.open(event.at, event.transport);
      return;
    case "connect-failed":
      listener.connectFailed(event.at, event.error);
      return;
    case "data":
      listener.data(event.at, event.bytes);
      return;
    case "closed":
      listener.closed(event.at, event.error);
      return;
  }
}
