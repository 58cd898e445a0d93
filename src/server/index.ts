export * from "./conn.ts";
export * from "./server.ts";
