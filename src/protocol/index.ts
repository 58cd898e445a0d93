export * from "./constants.ts";
export * from "./frames.ts";
export * from "./reader.ts";
export * from "./text.ts";
