/**
 * TLS set up on one end and not the other, or a certificate the client does
 * not trust, told apart from an ordinary network failure: these do not get
 * better by retrying, and the fix is a setting, so the error says which.
 *
 * - "server-speaks-tls": a plaintext client reached a TLS port. The server's
 *   TLS stack answers the ACQUIRE bytes with an alert record (first byte
 *   0x15) or, rarely, a handshake record (0x16); no lockd server frame
 *   starts with either byte.
 * - "server-plaintext": a TLS client reached a plaintext port (the handshake
 *   fails with a wrong-version / EPROTO error).
 * - "untrusted": the server's certificate does not verify against the CAs
 *   the client trusts (self-signed, unknown issuer, expired, wrong name).
 * - "client-certificate": the server wants a client certificate (mutual
 *   TLS) and got none, or one it does not trust. With TLS 1.3 this comes as
 *   an alert after the client's side of the handshake is done, so it ends
 *   the connection rather than failing the connect.
 */

export type TlsProblemKind = "server-speaks-tls" | "server-plaintext" | "untrusted" | "client-certificate";

export interface TlsProblem {
  readonly kind: TlsProblemKind;
  /** What is wrong, without the fix (a CLI adds the flag that fixes it). */
  readonly what: string;
  /** `what`, and the client library option that fixes it. */
  readonly message: string;
}

function problem(kind: TlsProblemKind, what: string, fix: string): TlsProblem {
  return { kind, what, message: `${what}: ${fix}` };
}

/** TLS record content types: alert (0x15) and handshake (0x16). */
const TLS_ALERT = 0x15;
const TLS_HANDSHAKE = 0x16;

/** The first byte a plaintext client read from `where` says the server speaks TLS. */
export function plaintextToTls(firstByte: number, where: string): TlsProblem | null {
  if (firstByte !== TLS_ALERT && firstByte !== TLS_HANDSHAKE) return null;
  return problem("server-speaks-tls", `the server at ${where} speaks TLS and this client does not`, "set the tls option (true for the system CAs, or { ca } for the CA that signed its certificate)");
}

/** OpenSSL / Node verification codes that mean "not trusted". */
const UNTRUSTED = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_UNTRUSTED",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_SIGNATURE_FAILURE",
  "CERT_REJECTED",
  "HOSTNAME_MISMATCH",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** Classify an error of a TLS connect (Bun or node:tls), or null when it is not a TLS set-up problem. */
export function tlsConnectProblem(error: unknown, where: string): TlsProblem | null {
  const code = (error as { code?: unknown } | null)?.code;
  const text = `${typeof code === "string" ? code : ""} ${(error as Error | null)?.message ?? ""}`;
  if (typeof code === "string" && UNTRUSTED.has(code)) {
    return problem("untrusted", `the server at ${where} presented a certificate this client does not trust (${(error as Error).message})`, "set tls.ca to the CA that signed it");
  }
  if (/WRONG_VERSION_NUMBER|packet length too long|unknown protocol|EPROTO|record layer failure/i.test(text)) {
    return problem("server-plaintext", `the server at ${where} does not speak TLS (${(error as Error).message})`, "connect without the tls option");
  }
  return null;
}

/** Classify the error that ended a TLS connection before the grant, or null. */
export function tlsClosedProblem(error: unknown, where: string): TlsProblem | null {
  const text = `${(error as { code?: unknown } | null)?.code ?? ""} ${(error as Error | null)?.message ?? ""}`;
  const alert = /ALERT_(CERTIFICATE_REQUIRED|UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|CERTIFICATE_REVOKED|UNSUPPORTED_CERTIFICATE)/.exec(text);
  if (alert === null) return null;
  const what = alert[1] === "CERTIFICATE_REQUIRED"
    ? `the server at ${where} requires a client certificate (mutual TLS) and none was sent`
    : `the server at ${where} refused this client's certificate (${alert[1]!.toLowerCase().replaceAll("_", " ")})`;
  return problem("client-certificate", what, "set tls.cert and tls.key to a certificate signed by the CA the server trusts");
}

/** An error that carries a TlsProblem. */
export class TlsSetupError extends Error {
  override readonly name = "TlsSetupError";
  constructor(
    readonly problem: TlsProblem,
    cause?: unknown,
  ) {
    super(problem.message, { cause });
  }
}
