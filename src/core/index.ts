export * from "./engine.ts";
export * from "./session.ts";
export * from "./stats.ts";
export * from "./tokens.ts";
export * from "./wheel.ts";
