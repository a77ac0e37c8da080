// The extension's decisions as plain functions of plain values: what to launch, what
// to send as settings, what the status bar says. Nothing here imports `vscode`, so the
// tests run under plain Node without an editor.

import * as fs from "node:fs";
import * as path from "node:path";

export const SECTION = "midword";

/** Keys of the `midword` section that configure this extension, not the server. The
 * server reports every key it does not know as a problem (a warning popup), so these
 * never reach it. `trace` is vscode-languageclient's own `midword.trace.server`. */
export const CLIENT_ONLY_KEYS: readonly string[] = ["serverCommand", "serverEnv", "trace"];

export const DEFAULT_SERVER_COMMAND: readonly string[] = ["midword", "serve"];

export type JsonObject = { [key: string]: unknown };

function isObject(value: unknown): value is JsonObject {
    return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** What `WorkspaceConfiguration.inspect(key)` reports about one setting: its value
 * in each settings layer, undefined where that layer does not set it. */
export interface SettingLayers {
    defaultValue?: unknown;
    globalValue?: unknown;
    workspaceValue?: unknown;
    workspaceFolderValue?: unknown;
}

/** Whether the user set the setting anywhere (User, Remote or Workspace settings), as
 * opposed to it standing at the default the extension contributes. */
export function userSet(layers: SettingLayers | undefined): boolean {
    return (
        layers !== undefined &&
        (layers.globalValue !== undefined || layers.workspaceValue !== undefined || layers.workspaceFolderValue !== undefined)
    );
}

/**
 * The settings the server should see, from the whole `midword` section as VS Code
 * holds it (`section`) and what each key's settings layers hold (`inspect`).
 *
 * Only what the user set is sent; every other key of the section goes as `null`, which
 * the server reads as "not set": it then uses its own default, which may come from its
 * command line (`midword serve --model ...`). Sending the extension's contributed
 * defaults instead would override that. A key is always sent (`null` rather than left
 * out) so that removing a setting takes the server back to its default: a key that is
 * missing would leave the server's previous value in place. The client's own keys
 * never go; unknown keys do, so a misspelt `midword.maxToken` in settings.json gets
 * the server's "not a setting" message instead of being ignored in silence.
 */
export function serverSettings(section: unknown, inspect: (key: string) => SettingLayers | undefined): JsonObject {
    const out: JsonObject = {};
    if (!isObject(section)) {
        return out;
    }
    for (const [key, value] of Object.entries(section)) {
        if (CLIENT_ONLY_KEYS.includes(key) || value === undefined) {
            continue;
        }
        out[key] = userSet(inspect(key)) ? value : null;
    }
    return out;
}

/**
 * `workspace/didChangeConfiguration` params with the `midword` section replaced by
 * `settings()` (what serverSettings makes of the section as it is now).
 * vscode-languageclient sends `{settings: {midword: {...whole section...}}}` for
 * `synchronize.configurationSection: "midword"`; anything else passes unchanged.
 */
export function filterConfigurationChange<T>(params: T, settings: () => JsonObject): T {
    if (!isObject(params) || !isObject(params.settings) || !(SECTION in params.settings)) {
        return params;
    }
    // Same shape as what came in, one level down replaced; hence the cast.
    return { ...params, settings: { ...params.settings, [SECTION]: settings() } } as T;
}

// -- launching the server ------------------------------------------------------------------

export interface LaunchConfig {
    serverCommand: unknown;
    serverEnv: unknown;
}

export interface HostInfo {
    env: NodeJS.ProcessEnv;
    platform: NodeJS.Platform;
    /** Where a relative program path is looked up (the first workspace folder). */
    cwd: string | undefined;
    /** Whether `file` exists and can be run. */
    isExecutable: (file: string) => boolean;
}

export type LaunchPlan =
    | { ok: true; command: string; args: string[]; env: NodeJS.ProcessEnv; display: string }
    | { ok: false; message: string; display: string };

/** A command line as a user would type it, for messages. */
export function formatCommand(command: readonly string[]): string {
    return command.map((arg) => (arg === "" || /[\s"'\\$`]/.test(arg) ? JSON.stringify(arg) : arg)).join(" ");
}

function pathKey(env: NodeJS.ProcessEnv, platform: NodeJS.Platform): string {
    // Windows environments spell it `Path` as often as `PATH`.
    if (platform === "win32") {
        return Object.keys(env).find((key) => key.toUpperCase() === "PATH") ?? "Path";
    }
    return "PATH";
}

/**
 * The file `program` names, found the way a shell would: a path with a separator is
 * taken as is (relative to `host.cwd`), a bare name is looked up on the PATH of the
 * server's environment (with PATHEXT on Windows). Undefined when there is none.
 * Resolving it here, instead of letting spawn fail, gives a message that says what
 * to do rather than `spawn midword ENOENT`.
 */
export function resolveProgram(program: string, env: NodeJS.ProcessEnv, host: HostInfo): string | undefined {
    const p = host.platform === "win32" ? path.win32 : path.posix;
    // As cmd.exe does: a name without an extension is tried with each of PATHEXT.
    const extensions =
        host.platform === "win32" && p.extname(program) === ""
            ? (env.PATHEXT ?? ".COM;.EXE;.BAT;.CMD").split(";").filter((ext) => ext !== "")
            : [""];
    const candidates = (base: string) => extensions.map((ext) => base + ext);
    const hasSeparator = program.includes("/") || (host.platform === "win32" && program.includes("\\"));
    if (hasSeparator || p.isAbsolute(program)) {
        const base = p.isAbsolute(program) || host.cwd === undefined ? program : p.resolve(host.cwd, program);
        return candidates(base).find(host.isExecutable);
    }
    const dirs = (env[pathKey(env, host.platform)] ?? "").split(p.delimiter).filter((dir) => dir !== "");
    for (const dir of dirs) {
        const found = candidates(p.join(dir, program)).find(host.isExecutable);
        if (found !== undefined) {
            return found;
        }
    }
    return undefined;
}

const HOW_TO_FIX =
    'Install midword (`pip install -e .` in its repository, inside the virtual environment you want) ' +
    'or set "midword.serverCommand" to the full command, e.g. ["/path/to/.venv/bin/midword", "serve"].';

/** The message for a server that could not be started with `display`. */
export function cannotStartMessage(display: string, reason: string): string {
    return `midword: could not start the language server with \`${display}\`: ${reason}. ${HOW_TO_FIX}`;
}

/** What to spawn for the configured `midword.serverCommand` and `midword.serverEnv`. */
export function planLaunch(config: LaunchConfig, host: HostInfo): LaunchPlan {
    const command = config.serverCommand ?? DEFAULT_SERVER_COMMAND;
    if (!Array.isArray(command) || command.length === 0 || !command.every((arg) => typeof arg === "string")) {
        const display = JSON.stringify(command);
        return {
            ok: false,
            display,
            message:
                `midword: "midword.serverCommand" must be a non-empty list of strings (program, then arguments), ` +
                `got ${display}. The default is ["midword", "serve"].`,
        };
    }
    const display = formatCommand(command);
    const extra = config.serverEnv ?? {};
    if (!isObject(extra) || !Object.values(extra).every((value) => typeof value === "string")) {
        return {
            ok: false,
            display,
            message: `midword: "midword.serverEnv" must be an object of strings, got ${JSON.stringify(extra)}.`,
        };
    }
    const env: NodeJS.ProcessEnv = { ...host.env, ...(extra as Record<string, string>) };
    const [program, ...args] = command as string[];
    if (program.trim() === "") {
        return { ok: false, display, message: cannotStartMessage(display, "the program name is empty") };
    }
    const resolved = resolveProgram(program, env, host);
    if (resolved === undefined) {
        const where = /[\\/]/.test(program) ? "that file does not exist or is not executable" : `\`${program}\` is not on PATH`;
        return { ok: false, display, message: cannotStartMessage(display, where) };
    }
    return { ok: true, command: resolved, args, env, display };
}

// -- status ------------------------------------------------------------------------------

/** The payload of the server's `midword/status` notification, plus the client's own
 * states for the times the server cannot speak for itself. */
export interface ServerStatus {
    state: "loading" | "ready" | "busy" | "error" | "starting" | "stopped" | string;
    message?: string;
    lastLatencyMs?: number | null;
}

export interface StatusView {
    text: string;
    tooltip: string;
    /** What a screen reader says for the item: `midword: <state> — <message>`. */
    label: string;
    /** The status bar background to use: errors stand out, everything else is plain. */
    severity: "error" | "warning" | "normal";
    /** What clicking the item runs: the log when something is wrong, else the stats. */
    command: "midword.showLog" | "midword.showStats";
}

const ICONS: Record<string, string> = {
    starting: "$(loading~spin)",
    loading: "$(loading~spin)",
    ready: "$(check)",
    busy: "$(sync~spin)",
    error: "$(error)",
    stopped: "$(debug-stop)",
    disabled: "$(circle-slash)",
};

export function formatLatency(ms: number | null | undefined): string {
    if (typeof ms !== "number" || !Number.isFinite(ms)) {
        return "none yet";
    }
    return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** The status bar item for `status`; `enabled` is `midword.enable`, which the server
 * reports only as a "ready" with a message. */
export function statusView(status: ServerStatus, enabled: boolean): StatusView {
    const state = !enabled && (status.state === "ready" || status.state === "busy") ? "disabled" : status.state;
    const icon = ICONS[state] ?? "$(question)";
    const message = status.message?.trim() ? status.message.trim() : state;
    const label = `midword: ${state} — ${message}`;
    const lines = [label, `Last completion: ${formatLatency(status.lastLatencyMs)}`];
    const troubled = state === "error" || state === "stopped";
    lines.push(troubled ? "Click to show the log." : "Click to show the server's stats.");
    return {
        text: `${icon} midword`,
        tooltip: lines.join("\n"),
        label,
        severity: state === "error" ? "error" : state === "stopped" ? "warning" : "normal",
        command: troubled ? "midword.showLog" : "midword.showStats",
    };
}

/** Accepts a `midword/status` payload only if it has the shape the server documents;
 * a malformed one is ignored rather than shown as "undefined". */
export function parseStatus(params: unknown): ServerStatus | undefined {
    if (!isObject(params) || typeof params.state !== "string") {
        return undefined;
    }
    const latency = params.lastLatencyMs;
    return {
        state: params.state,
        message: typeof params.message === "string" ? params.message : undefined,
        lastLatencyMs: typeof latency === "number" ? latency : null,
    };
}

/** The `midword/stats` answer as shown to the user. */
export function formatStats(stats: unknown, when: Date): string {
    return `midword stats at ${when.toISOString()}\n${JSON.stringify(stats, null, 2)}\n`;
}

/** Whether `file` is a regular file this process may run (on Windows: exists). */
export function fileIsExecutable(file: string): boolean {
    try {
        if (!fs.statSync(file).isFile()) {
            return false;
        }
        fs.accessSync(file, process.platform === "win32" ? fs.constants.F_OK : fs.constants.X_OK);
        return true;
    } catch {
        return false;
    }
}

// -- typing while the model loads -------------------------------------------------------------

/** A document as the editor last showed it: enough to tell whether it changed since. */
export interface DocumentMark {
    uri: string;
    version: number;
}

/** States in which the server cannot complete yet: typing then may go unanswered. */
export function isWaitingState(state: string): boolean {
    return state === "starting" || state === "loading";
}

/**
 * Whether to ask the editor for inline suggestions once more now that the server is ready.
 * VS Code asks its inline providers only while the user types, and not always for typing
 * that happens while the window itself is still starting; a user who typed while the model
 * loaded and then stopped would otherwise wait for a suggestion that never comes. Ask again
 * only for the editor the user typed in, and only when nothing changed there since: once
 * the user types on, the editor's own request covers the new text.
 */
export function shouldAskAgainWhenReady(
    previousState: string,
    newState: string,
    typedWhileWaiting: DocumentMark | undefined,
    active: DocumentMark | undefined,
): boolean {
    if (!isWaitingState(previousState) || newState !== "ready") {
        return false;
    }
    if (typedWhileWaiting === undefined || active === undefined) {
        return false;
    }
    return typedWhileWaiting.uri === active.uri && typedWhileWaiting.version === active.version;
}
