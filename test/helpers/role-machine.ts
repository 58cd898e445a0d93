/**
 * A RoleMachine whose effects are recorded as RoleAction data, and whose
 * event methods return the actions that event caused (the timer it armed
 * apart: `armedAt`). Tests and the simulation read decisions this way.
 */
import { type RoleAction, type RoleEffects, RoleMachine, type RoleMachineOptions } from "../../src/failover/machine.ts";

/** The effects, recorded. */
export class RecordedEffects implements RoleEffects {
  actions: RoleAction[] = [];
  armedAt = Infinity;
  read(): void {
    this.actions.push({ type: "read" });
  }
  create(floor: number): void {
    this.actions.push({ type: "create", floor });
  }
  takeover(watched: Extract<RoleAction, { type: "takeover" }>["watched"]): void {
    this.actions.push({ type: "takeover", watched });
  }
  renew(epoch: number, sentAt: number, carryLeaseMs: number): void {
    this.actions.push({ type: "renew", epoch, sentAt, carryLeaseMs });
  }
  raise(epoch: number, leaseMs: number): void {
    this.actions.push({ type: "raise", epoch, leaseMs });
  }
  reserve(epoch: number): void {
    this.actions.push({ type: "reserve", epoch });
  }
  activate(activation: Extract<RoleAction, { type: "activate" }>): void {
    this.actions.push(activation);
  }
  stepDown(epoch: number, reason: string): void {
    this.actions.push({ type: "stepDown", epoch, reason });
  }
  release(release: Extract<RoleAction, { type: "release" }>): void {
    this.actions.push(release);
  }
  arm(at: number): void {
    this.armedAt = at;
  }
  take(): RoleAction[] {
    const out = this.actions;
    this.actions = [];
    return out;
  }
}

const EVENTS = new Set(["start", "tick", "readDone", "createDone", "takeoverDone", "renewDone", "reserveDone", "raise", "raiseDone", "stop", "abandon"]);

/** The machine's event methods, returning what each decided. */
type Events = {
  [K in "start" | "tick" | "readDone" | "createDone" | "takeoverDone" | "renewDone" | "reserveDone" | "raise" | "raiseDone" | "stop" | "abandon"]: (
    ...args: Parameters<RoleMachine[K]>
  ) => RoleAction[];
};

export type DrivenMachine = Omit<RoleMachine, keyof Events> & Events & { readonly effects: RecordedEffects };

/** A RoleMachine driven by tests: each event returns the actions it caused. */
export function drivenMachine(options: RoleMachineOptions): DrivenMachine {
  const effects = new RecordedEffects();
  const machine = new RoleMachine(options, effects);
  return new Proxy(machine, {
    get(target, key, receiver) {
      if (key === "effects") return effects;
      const value = Reflect.get(target, key, receiver);
      if (typeof value === "function" && typeof key === "string" && EVENTS.has(key)) {
        return (...args: unknown[]) => {
          effects.take();
          (value as (...a: unknown[]) => void).apply(target, args);
          return effects.take();
        };
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  }) as unknown as DrivenMachine;
}
