/** The admin token the lockd bench child configures and the force-release bench sends. */
export const BENCH_ADMIN_TOKEN = "bench-admin-token";
