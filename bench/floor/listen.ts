/**
 * The floor for start-up: a program that only listens on 127.0.0.1:0 and
 * says so on stderr, compiled the same way as lockd (bench/startup.ts).
 */
const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
process.stderr.write(`${JSON.stringify({ msg: "listening", listen: `127.0.0.1:${listener.port}` })}\n`);
process.on("SIGTERM", () => process.exit(0));
