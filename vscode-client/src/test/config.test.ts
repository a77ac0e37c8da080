// Unit tests of the extension's plain logic (src/config.ts); they need Node, not VS Code.

import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, it } from "node:test";

import {
    CLIENT_ONLY_KEYS,
    HostInfo,
    SettingLayers,
    fileIsExecutable,
    filterConfigurationChange,
    formatCommand,
    formatLatency,
    formatStats,
    isWaitingState,
    parseStatus,
    planLaunch,
    resolveProgram,
    serverSettings,
    shouldAskAgainWhenReady,
    statusView,
} from "../config";
import { contributedDefaults, contributedKeys, contributedScopes } from "./manifest";

describe("settings sent to the server", () => {
    // What WorkspaceConfiguration.inspect reports, from a table of the layers set.
    const layers = (set: Record<string, SettingLayers>) => (key: string) => set[key] ?? { defaultValue: "contributed" };

    it("sends what the user set, null for what stands at the extension's default, never the client's keys", () => {
        const section = {
            enable: false,
            model: "gemma3",
            maxTokens: 0,
            grammars: { "*.toml": "grammars/toml.lark" },
            mode: "cpc",
            serverCommand: ["midword", "serve"],
            serverEnv: { A: "1" },
            trace: { server: "verbose" },
            maxToken: 12,
        };
        const inspect = layers({
            enable: { defaultValue: true, globalValue: false },
            maxTokens: { defaultValue: 48, workspaceValue: 0 },
            grammars: { defaultValue: {}, workspaceFolderValue: { "*.toml": "grammars/toml.lark" } },
            // A key package.json does not contribute: VS Code knows no default for it.
            maxToken: { globalValue: 12 },
            serverCommand: { defaultValue: ["midword", "serve"], globalValue: ["midword", "serve"] },
        });
        assert.deepEqual(serverSettings(section, inspect), {
            enable: false,
            model: null,
            maxTokens: 0,
            grammars: { "*.toml": "grammars/toml.lark" },
            mode: null,
            maxToken: 12,
        });
    });

    it("sends a setting the user set to the default value itself", () => {
        const inspect = layers({ model: { defaultValue: "gemma3", globalValue: "gemma3" } });
        assert.deepEqual(serverSettings({ model: "gemma3" }, inspect), { model: "gemma3" });
    });

    it("sends nothing for a section that is not an object", () => {
        const inspect = layers({});
        assert.deepEqual(serverSettings(undefined, inspect), {});
        assert.deepEqual(serverSettings(null, inspect), {});
        assert.deepEqual(serverSettings(["model"], inspect), {});
    });

    it("replaces the section of didChangeConfiguration as vscode-languageclient sends it", () => {
        // What SyncConfigurationFeature builds for configurationSection "midword".
        const settings = Object.create(null) as Record<string, unknown>;
        settings.midword = { model: "gemma3", serverCommand: ["x"], trace: { server: "off" } };
        const now = () => ({ model: null });
        const sent = filterConfigurationChange({ settings }, now);
        assert.deepEqual(sent, { settings: { midword: { model: null } } });
        assert.deepEqual(settings.midword, { model: "gemma3", serverCommand: ["x"], trace: { server: "off" } },
            "the caller's object is left alone");
        assert.deepEqual(filterConfigurationChange({ settings: null }, now), { settings: null });
        assert.deepEqual(filterConfigurationChange({ settings: { other: { serverCommand: 1 } } }, now),
            { settings: { other: { serverCommand: 1 } } });
    });

    it("covers package.json: with nothing set, every server setting goes as null and nothing else goes", () => {
        const keys = contributedKeys();
        for (const key of ["serverCommand", "serverEnv", "trace.server"]) {
            assert.ok(keys.includes(key), `package.json contributes midword.${key}`);
        }
        const sent = serverSettings(contributedDefaults(), layers({}));
        const serverKeys = keys.filter((key) => !CLIENT_ONLY_KEYS.includes(key.split(".")[0])).sort();
        assert.deepEqual(Object.keys(sent).sort(), serverKeys);
        assert.ok(Object.values(sent).every((value) => value === null), JSON.stringify(sent));
    });

    it("lets the user set where the server is in User settings, local or remote (scope window)", () => {
        // machine-overridable settings are read only from the Machine settings in a
        // remote window on newer VS Code (code-server 4.139), so a serverCommand in the
        // User settings was ignored there.
        const scopes = contributedScopes();
        for (const key of ["serverCommand", "serverEnv"]) {
            assert.equal(scopes[key], "window", `midword.${key}`);
        }
        // ...and a workspace never gets to choose it unless trusted.
        const restricted = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"))
            .capabilities.untrustedWorkspaces.restrictedConfigurations;
        assert.deepEqual(restricted, ["midword.serverCommand", "midword.serverEnv"]);
    });
});

describe("launching the server", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "midword-client-test-"));
    after(() => fs.rmSync(tmp, { recursive: true, force: true }));
    const bin = path.join(tmp, "bin");
    const venv = path.join(tmp, "project", ".venv", "bin");
    fs.mkdirSync(bin, { recursive: true });
    fs.mkdirSync(venv, { recursive: true });
    const write = (file: string, mode: number) => {
        fs.writeFileSync(file, "#!/bin/sh\n");
        fs.chmodSync(file, mode);
    };
    write(path.join(bin, "midword"), 0o755);
    write(path.join(venv, "midword"), 0o755);
    write(path.join(bin, "notrunnable"), 0o644);

    const posix = process.platform !== "win32";
    const host = (env: NodeJS.ProcessEnv, cwd?: string): HostInfo => ({
        env,
        platform: process.platform,
        cwd,
        isExecutable: fileIsExecutable,
    });

    it("finds the default command on PATH and merges serverEnv into the environment", () => {
        const plan = planLaunch(
            { serverCommand: undefined, serverEnv: { OMP_NUM_THREADS: "2", HOME: "/elsewhere" } },
            host({ PATH: ["/nonexistent", bin].join(path.delimiter), HOME: "/home/u", KEEP: "1" }),
        );
        assert.ok(plan.ok, JSON.stringify(plan));
        assert.equal(plan.command, path.join(bin, "midword"));
        assert.deepEqual(plan.args, ["serve"]);
        assert.equal(plan.env.OMP_NUM_THREADS, "2");
        assert.equal(plan.env.HOME, "/elsewhere");
        assert.equal(plan.env.KEEP, "1");
        assert.equal(plan.display, "midword serve");
    });

    it("looks the program up on the PATH that serverEnv sets", () => {
        const plan = planLaunch(
            { serverCommand: ["midword", "serve", "--weights", "float32"], serverEnv: { PATH: bin } },
            host({ PATH: "/nonexistent" }),
        );
        assert.ok(plan.ok);
        assert.equal(plan.command, path.join(bin, "midword"));
        assert.deepEqual(plan.args, ["serve", "--weights", "float32"]);
    });

    it("resolves a relative program path against the workspace folder", () => {
        const plan = planLaunch(
            { serverCommand: [".venv/bin/midword", "serve"], serverEnv: {} },
            host({ PATH: "" }, path.join(tmp, "project")),
        );
        assert.ok(plan.ok);
        assert.equal(plan.command, path.join(venv, "midword"));
    });

    it("says which command failed and how to fix it when the program is missing", () => {
        const plan = planLaunch({ serverCommand: ["midword", "serve"], serverEnv: {} }, host({ PATH: "/nonexistent" }));
        assert.ok(!plan.ok);
        assert.match(plan.message, /`midword serve`/);
        assert.match(plan.message, /not on PATH/);
        assert.match(plan.message, /midword\.serverCommand/);
        assert.match(plan.message, /[Ii]nstall midword/);

        const missing = planLaunch({ serverCommand: ["/no/such/python", "-m", "midword.server"], serverEnv: {} }, host({}));
        assert.ok(!missing.ok);
        assert.match(missing.message, /`\/no\/such\/python -m midword.server`/);
        assert.match(missing.message, /does not exist or is not executable/);
    });

    it("does not take a file without execute permission", { skip: !posix && "POSIX permissions" }, () => {
        assert.equal(fileIsExecutable(path.join(bin, "notrunnable")), false);
        assert.equal(fileIsExecutable(bin), false, "a directory is not a program");
        assert.equal(fileIsExecutable(path.join(bin, "midword")), true);
        const plan = planLaunch({ serverCommand: ["notrunnable"], serverEnv: {} }, host({ PATH: bin }));
        assert.ok(!plan.ok);
    });

    it("rejects malformed settings with the value that was given", () => {
        for (const bad of [[], "midword serve", [1, 2], {}]) {
            const plan = planLaunch({ serverCommand: bad, serverEnv: {} }, host({ PATH: bin }));
            assert.ok(!plan.ok, JSON.stringify(bad));
            assert.match(plan.message, /midword\.serverCommand" must be a non-empty list of strings/);
            assert.ok(plan.message.includes(JSON.stringify(bad)));
        }
        const plan = planLaunch({ serverCommand: ["midword"], serverEnv: { N: 2 } }, host({ PATH: bin }));
        assert.ok(!plan.ok);
        assert.match(plan.message, /midword\.serverEnv" must be an object of strings/);
    });

    it("uses PATHEXT and the Windows Path variable on Windows", () => {
        const files = new Set(["C:\\py\\Scripts\\midword.EXE", "C:\\tools\\run.cmd"]);
        const win: HostInfo = { env: {}, platform: "win32", cwd: "C:\\work", isExecutable: (f) => files.has(f) };
        const env = { Path: "C:\\Windows;C:\\py\\Scripts", PATHEXT: ".COM;.EXE" };
        assert.equal(resolveProgram("midword", env, win), "C:\\py\\Scripts\\midword.EXE");
        assert.equal(resolveProgram("midword.EXE", env, win), "C:\\py\\Scripts\\midword.EXE");
        assert.equal(resolveProgram("..\\tools\\run.cmd", env, win), "C:\\tools\\run.cmd");
        assert.equal(resolveProgram("other", env, win), undefined);
    });

    it("quotes arguments in messages only where a shell would need it", () => {
        assert.equal(formatCommand(["midword", "serve"]), "midword serve");
        assert.equal(formatCommand(["/My Tools/midword", "serve", ""]), '"/My Tools/midword" serve ""');
    });
});

describe("status bar", () => {
    it("shows each server state with its icon, message and last latency", () => {
        const ready = statusView({ state: "ready", message: "gemma3 loaded", lastLatencyMs: 812.4 }, true);
        assert.equal(ready.text, "$(check) midword");
        assert.match(ready.tooltip, /^midword: ready — gemma3 loaded\nLast completion: 812 ms\n/);
        assert.equal(ready.severity, "normal");
        assert.equal(ready.command, "midword.showStats");

        const loading = statusView({ state: "loading", message: "loading gemma3", lastLatencyMs: null }, true);
        assert.equal(loading.text, "$(loading~spin) midword");
        assert.match(loading.tooltip, /Last completion: none yet/);

        assert.equal(statusView({ state: "busy", message: "completing" }, true).text, "$(sync~spin) midword");

        const error = statusView({ state: "error", message: "model gemma4 not found", lastLatencyMs: 1500 }, true);
        assert.equal(error.text, "$(error) midword");
        assert.equal(error.severity, "error");
        assert.equal(error.command, "midword.showLog");
        assert.match(error.tooltip, /model gemma4 not found/);
        assert.match(error.tooltip, /Last completion: 1\.5 s/);

        assert.equal(statusView({ state: "stopped" }, true).severity, "warning");
        assert.match(statusView({ state: "something-new" }, true).text, /\$\(question\)/);
    });

    it("shows completions switched off when midword.enable is false", () => {
        const view = statusView({ state: "ready", message: "completions disabled (midword.enable is false)" }, false);
        assert.equal(view.text, "$(circle-slash) midword");
        assert.match(view.tooltip, /^midword: disabled/);
        // A server that failed stays shown as failed, enabled or not.
        assert.equal(statusView({ state: "error", message: "x" }, false).text, "$(error) midword");
    });

    it("accepts only well-formed midword/status payloads", () => {
        assert.deepEqual(parseStatus({ state: "ready", message: "ok", lastLatencyMs: 12 }), {
            state: "ready",
            message: "ok",
            lastLatencyMs: 12,
        });
        assert.deepEqual(parseStatus({ state: "loading", message: 3 }), { state: "loading", message: undefined, lastLatencyMs: null });
        assert.equal(parseStatus(null), undefined);
        assert.equal(parseStatus({ message: "no state" }), undefined);
        assert.equal(parseStatus("ready"), undefined);
    });

    it("formats latencies and stats", () => {
        assert.equal(formatLatency(undefined), "none yet");
        assert.equal(formatLatency(Number.NaN), "none yet");
        assert.equal(formatLatency(0.4), "0 ms");
        assert.equal(formatLatency(999.4), "999 ms");
        assert.equal(formatLatency(12_345), "12.3 s");
        const text = formatStats({ requests: 3 }, new Date(Date.UTC(2025, 0, 2, 3, 4, 5)));
        assert.equal(text, 'midword stats at 2025-01-02T03:04:05.000Z\n{\n  "requests": 3\n}\n');
    });
});

describe("typing while the model loads", () => {
    const typed = { uri: "file:///w/early.py", version: 9 };

    it("asks again when the server turns ready and the document is as the user left it", () => {
        assert.equal(shouldAskAgainWhenReady("loading", "ready", typed, { ...typed }), true);
        assert.equal(shouldAskAgainWhenReady("starting", "ready", typed, { ...typed }), true);
    });

    it("does not ask when the user typed on, switched documents, or typed nothing", () => {
        assert.equal(shouldAskAgainWhenReady("loading", "ready", typed, { ...typed, version: 10 }), false);
        assert.equal(shouldAskAgainWhenReady("loading", "ready", typed, { uri: "file:///w/other.py", version: 9 }), false);
        assert.equal(shouldAskAgainWhenReady("loading", "ready", undefined, typed), false);
        assert.equal(shouldAskAgainWhenReady("loading", "ready", typed, undefined), false);
    });

    it("asks only on the way from waiting to ready", () => {
        assert.equal(shouldAskAgainWhenReady("ready", "ready", typed, typed), false);
        assert.equal(shouldAskAgainWhenReady("busy", "ready", typed, typed), false);
        assert.equal(shouldAskAgainWhenReady("loading", "error", typed, typed), false);
        assert.equal(shouldAskAgainWhenReady("loading", "busy", typed, typed), false);
    });

    it("waits in the states the server cannot answer in", () => {
        assert.deepEqual(
            ["starting", "loading", "ready", "busy", "error", "stopped"].filter(isWaitingState),
            ["starting", "loading"],
        );
    });
});
