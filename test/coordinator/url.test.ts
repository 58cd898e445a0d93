// The coordinator URL with libpq's meaning: one test per form, good, malformed and with a parameter lockd
// does not understand; and the whole command: exit 64 with one line naming it, never a stack trace.
import { describe, expect, test } from "bun:test";
import { CoordinatorUrlError, parseCoordinatorUrl, redactUrl } from "../../src/failover/url.ts";
import { runCli } from "../fixtures/ops-child.ts";

const base = { user: "lockd", password: undefined, database: "lockd", targetSessionAttrs: "read-write" as const, sslmode: undefined, connectTimeoutS: undefined, applicationName: undefined };

function refusal(url: string): string {
  try {
    parseCoordinatorUrl(url);
  } catch (error) {
    expect(error).toBeInstanceOf(CoordinatorUrlError);
    const message = (error as Error).message;
    expect(message.split("\n")).toHaveLength(1);
    return message;
  }
  throw new Error(`expected ${url} to be refused`);
}

describe("good forms", () => {
  test("one host, with and without a port; no host at all", () => {
    expect(parseCoordinatorUrl("postgres://lockd@db1:5441/lockd")).toEqual({ ...base, endpoints: [{ host: "db1", port: 5441 }] });
    expect(parseCoordinatorUrl("postgresql://lockd@db1/lockd").endpoints).toEqual([{ host: "db1", port: 5432 }]);
    expect(parseCoordinatorUrl("postgres:///lockd?user=lockd")).toEqual({ ...base, endpoints: [{ host: "localhost", port: 5432 }] });
  });

  test("several hosts in the URI, each with its port or the default, IPv6 in brackets", () => {
    expect(parseCoordinatorUrl("postgres://lockd@h1:5441,h2:5442/lockd?target_session_attrs=read-write")).toEqual({
      ...base,
      endpoints: [{ host: "h1", port: 5441 }, { host: "h2", port: 5442 }],
    });
    expect(parseCoordinatorUrl("postgres://lockd@10.0.0.1,[fd00::5]:6432,db3.internal/lockd").endpoints).toEqual([
      { host: "10.0.0.1", port: 5432 },
      { host: "fd00::5", port: 6432 },
      { host: "db3.internal", port: 5432 },
    ]);
  });

  test("host= and port= parameters replace the URI's; one port for all, or one per host", () => {
    expect(parseCoordinatorUrl("postgres://lockd@ignored/lockd?host=a,b&port=5441,5442").endpoints).toEqual([{ host: "a", port: 5441 }, { host: "b", port: 5442 }]);
    expect(parseCoordinatorUrl("postgres:///lockd?host=a,b,c&port=6000&user=lockd").endpoints).toEqual([{ host: "a", port: 6000 }, { host: "b", port: 6000 }, { host: "c", port: 6000 }]);
    expect(parseCoordinatorUrl("postgres://lockd@/lockd?host=%2Fvar%2Frun%2Fpostgresql").endpoints).toEqual([{ host: "/var/run/postgresql", port: 5432 }]);
  });

  test("target_session_attrs: read-write by default, primary its synonym; the other parameters libpq gives them", () => {
    expect(parseCoordinatorUrl("postgres://lockd@h/lockd?target_session_attrs=primary").targetSessionAttrs).toBe("primary");
    expect(parseCoordinatorUrl("postgres://lockd:p%40ss@h/lockd?sslmode=verify-full&connect_timeout=3&application_name=lockd%20payments")).toEqual({
      ...base,
      password: "p@ss",
      endpoints: [{ host: "h", port: 5432 }],
      sslmode: "verify-full",
      connectTimeoutS: 3,
      applicationName: "lockd payments",
    });
    expect(parseCoordinatorUrl("postgres://h/x?dbname=lockd&user=lockd&password=pw")).toMatchObject({ database: "lockd", user: "lockd", password: "pw" });
  });

  test("the password never shows in the redacted URL", () => {
    expect(redactUrl("postgres://lockd:secret@h1:5441,h2:5442/lockd")).toBe("postgres://lockd:****@h1:5441,h2:5442/lockd");
    expect(redactUrl("postgres://lockd@h/lockd?user=x&password=secret&sslmode=require")).toBe("postgres://lockd@h/lockd?user=x&password=****&sslmode=require");
  });
});

describe("malformed", () => {
  test("each is one line naming what is wrong", () => {
    expect(refusal("not a url")).toBe('"not a url" is not a URL (example: postgres://lockd@db1.internal:5432,db2.internal:5432/lockd)');
    expect(refusal("mysql://u:p@h/x")).toBe("mysql://u:****@h/x is not a PostgreSQL URL (it must start with postgres:// or postgresql://)");
    expect(refusal("postgres://lockd@h1:54x1,h2/lockd")).toBe('the coordinator URL\'s port "54x1" (of h1:54x1) is not a port (1 to 65535)');
    expect(refusal("postgres://lockd@h1:70000/lockd")).toBe('the coordinator URL\'s port "70000" (of h1:70000) is not a port (1 to 65535)');
    expect(refusal("postgres://lockd@[fd00::5/lockd")).toBe('the coordinator URL\'s host "[fd00::5" opens a bracket it does not close');
    expect(refusal("postgres://lockd@h/lockd?host=a,b&port=1,2,3")).toBe("the coordinator URL gives 3 ports for 2 hosts: give one port for all, or one per host");
    expect(refusal("postgres://lockd@h/lockd?port=NaN")).toBe('the coordinator URL\'s port "NaN" (in port=) is not a port (1 to 65535)');
    expect(refusal("postgres://lockd@h/a/b")).toBe('the coordinator URL\'s database name "a/b" holds a slash (one database name after the hosts)');
    expect(refusal("postgres://lockd@h/lockd?sslmode")).toBe('the coordinator URL\'s parameter "sslmode" has no value (write name=value)');
    expect(refusal("postgres://lockd@h/lockd?sslmode=maybe")).toContain('sslmode="maybe" is not an SSL mode');
    expect(refusal("postgres://lockd@h/lockd?connect_timeout=0")).toContain('connect_timeout="0" is not a number of seconds');
    expect(refusal("postgres://lockd@h/l%zzd")).toContain("malformed percent-escape");
    expect(refusal("postgres://lockd@h/lockd?user=a&user=b")).toBe('the coordinator URL gives the parameter "user" twice');
  });

  test("a target_session_attrs that lets lockd pick a server it cannot write to is refused", () => {
    expect(refusal("postgres://lockd@h1,h2/lockd?target_session_attrs=any")).toBe(
      "the coordinator URL's target_session_attrs=any would let lockd use a server it cannot write to: lockd writes its row, so it needs read-write (the default) or primary",
    );
    expect(refusal("postgres://lockd@h/lockd?target_session_attrs=standby")).toContain("would let lockd use a server it cannot write to");
    expect(refusal("postgres://lockd@h/lockd?target_session_attrs=writable")).toBe('the coordinator URL\'s target_session_attrs="writable" is not one lockd understands (read-write, the default, or primary)');
  });
});

describe("a parameter lockd does not understand", () => {
  test("is named, with the ones it reads", () => {
    expect(refusal("postgres://lockd@h/lockd?load_balance_hosts=random")).toBe(
      'the coordinator URL\'s parameter "load_balance_hosts" is not one lockd understands (it reads host, port, dbname, user, password, target_session_attrs, sslmode, connect_timeout, application_name)',
    );
    expect(refusal("postgres://lockd@h/lockd?sslmode=require&keepalives=1")).toStartWith('the coordinator URL\'s parameter "keepalives" is not one lockd understands');
  });
});

describe("lockd serve", () => {
  test("a malformed URL or an unknown parameter: exit 64, one line naming it, no stack trace", async () => {
    for (const [url, says] of [
      ["postgres://lockd@h1:5441,h2:54x2/lockd", 'lockd serve: --coordinator: the coordinator URL\'s port "54x2" (of h2:54x2) is not a port (1 to 65535)\n'],
      ["postgres://lockd@h1/lockd?host=a,b&port=5441,NaN", 'lockd serve: --coordinator: the coordinator URL\'s port "NaN" (in port=) is not a port (1 to 65535)\n'],
      ["postgres://lockd@h1/lockd?statement_timeout=5s", 'lockd serve: --coordinator: the coordinator URL\'s parameter "statement_timeout" is not one lockd understands (it reads host, port, dbname, user, password, target_session_attrs, sslmode, connect_timeout, application_name)\n'],
    ] as const) {
      const served = await runCli(["serve", "--coordinator", url, "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0"]);
      expect({ url, code: served.code, err: served.err }).toEqual({ url, code: 64, err: says });
    }
  });
});
