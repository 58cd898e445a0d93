/**
 * The floor for `lockd run NAME -- true` (bench/startup.ts): a program that
 * only connects to the server given as its argument, sends one ACQUIRE,
 * reads ACQUIRED and closes; compiled the same way as lockd. Given a
 * command after `--`, it also runs that command between ACQUIRED and the
 * close (as lockd run does, without anything else lockd run does).
 *
 * Usage: acquire HOST:PORT NAME [-- COMMAND ARGS...]
 */
export {};

const args = process.argv.slice(2);
const split = args.indexOf("--");
const command = split < 0 ? [] : args.slice(split + 1);
const [hostPort = "127.0.0.1:7700", lockName = "bench"] = split < 0 ? args : args.slice(0, split);
const colon = hostPort.lastIndexOf(":");
const nameBytes = new TextEncoder().encode(lockName);
const frame = new Uint8Array(4 + 8 + nameBytes.length);
const view = new DataView(frame.buffer);
frame[0] = 0x01; // ACQUIRE
view.setUint16(2, 8 + nameBytes.length);
frame[4] = 1; // version
view.setUint32(6, 10_000); // lease_ms
view.setUint16(10, nameBytes.length);
frame.set(nameBytes, 12);

let exitCode = 1;
await new Promise<void>((resolve, reject) => {
  Bun.connect({
    hostname: hostPort.slice(0, colon),
    port: Number(hostPort.slice(colon + 1)),
    socket: {
      open(socket) {
        socket.write(frame);
      },
      data(socket, data) {
        // ACQUIRED is 4 + 8 bytes; anything else (WAITING, ERROR) is a failed run.
        exitCode = data[0] === 0x81 ? 0 : 2;
        if (exitCode !== 0 || command.length === 0) {
          socket.end();
          return;
        }
        const child = Bun.spawn(command, { stdio: ["inherit", "inherit", "inherit"] });
        void child.exited.then((code) => {
          exitCode = code;
          socket.end();
        });
      },
      close() {
        resolve();
      },
      error(_socket, error) {
        reject(error);
      },
      connectError(_socket, error) {
        reject(error);
      },
    },
  }).catch(reject);
});
process.exit(exitCode);
