/** Read a child's output stream line by line, as the lines arrive. */
export async function forEachLine(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void, afterChunk: () => void = () => {}): Promise<void> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of stream) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      onLine(line);
    }
    afterChunk();
  }
  if (pending !== "") onLine(pending);
  afterChunk();
}
