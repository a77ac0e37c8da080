// The extension's half of the protocol against the real `midword serve` (with the
// repository's fake engine, so no model loads): the settings it sends are accepted
// without complaint, and the status and stats it reads have the shape it expects.
// Skipped when the repository's Python environment is not there.

import { strict as assert } from "node:assert";
import * as cp from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import { MessageConnection, StreamMessageReader, StreamMessageWriter, createMessageConnection } from "vscode-jsonrpc/node";

import { ServerStatus, filterConfigurationChange, parseStatus, serverSettings, statusView } from "../config";
import { contributedDefaults } from "./manifest";

const REPO = path.resolve(__dirname, "..", "..", "..");
const PYTHON = process.env.MIDWORD_PYTHON ?? path.join(REPO, ".venv", process.platform === "win32" ? "Scripts/python.exe" : "bin/python");
const FAKE_ENGINE = "tests.fake_engine:FakeEngine";
// The model named on the server's command line, which the extension must not override
// with its own default.
const CLI_MODEL = "fake-from-the-command-line";
// Nothing set by the user: inspect finds only the contributed default.
const nothingSet = () => ({ defaultValue: "contributed" });

function skipReason(): string | false {
    if (!fs.existsSync(PYTHON)) {
        return `no Python environment at ${PYTHON} (set MIDWORD_PYTHON)`;
    }
    if (!fs.existsSync(path.join(REPO, "tests", "fake_engine.py"))) {
        return "not inside the midword repository";
    }
    return false;
}

async function waitFor<T>(what: string, probe: () => T | undefined, timeoutMs = 20_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
        const value = probe();
        if (value !== undefined) {
            return value;
        }
        if (Date.now() > deadline) {
            throw new Error(`timed out waiting for ${what}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
    }
}

describe("against midword serve", { skip: skipReason() }, () => {
    let server: cp.ChildProcess;
    let connection: MessageConnection;
    const statuses: ServerStatus[] = [];
    const shown: { type: number; message: string }[] = [];
    let stderr = "";

    before(async () => {
        server = cp.spawn(PYTHON, ["-m", "midword.server", "--engine", FAKE_ENGINE, "--model", CLI_MODEL], {
            cwd: REPO,
            stdio: ["pipe", "pipe", "pipe"],
        });
        server.stderr?.on("data", (data: Buffer) => (stderr += data.toString()));
        connection = createMessageConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
        connection.onNotification("midword/status", (params: unknown) => {
            const status = parseStatus(params);
            assert.ok(status, `malformed midword/status ${JSON.stringify(params)}`);
            statuses.push(status);
        });
        connection.onNotification("window/showMessage", (params: { type: number; message: string }) => shown.push(params));
        connection.onNotification("window/logMessage", () => undefined);
        connection.listen();
        // What the extension sends at start when the user set nothing, as
        // initializationOptions, then again as didChangeConfiguration.
        const section = contributedDefaults();
        await connection.sendRequest("initialize", {
            processId: process.pid,
            rootUri: null,
            capabilities: { workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: true } } },
            initializationOptions: serverSettings(section, nothingSet),
        });
        await connection.sendNotification("initialized", {});
        await connection.sendNotification("workspace/didChangeConfiguration",
            filterConfigurationChange({ settings: { midword: section } }, () => serverSettings(section, nothingSet)));
    });

    after(async () => {
        try {
            await connection.sendRequest("shutdown");
            await connection.sendNotification("exit");
        } catch {
            // already gone
        }
        connection.dispose();
        if (server.exitCode === null) {
            server.kill();
        }
    });

    it("loads and reports ready with the status payload the status bar reads", async () => {
        const ready = await waitFor("status ready", () => statuses.find((s) => s.state === "ready"));
        assert.ok(statuses.some((s) => s.state === "loading"), JSON.stringify(statuses));
        assert.equal(statusView(ready, true).text, "$(check) midword");
    });

    it("takes the settings the extension sends without a complaint", async () => {
        // A request answered means every notification before it was handled.
        await connection.sendRequest("midword/stats", {});
        assert.deepEqual(shown, [], `server complained: ${JSON.stringify(shown)}\n${stderr}`);
    });

    it("would complain about the client's keys, which is why they are filtered", async () => {
        const section = { ...contributedDefaults(), maxTokens: 47 };
        await connection.sendNotification("workspace/didChangeConfiguration", { settings: { midword: section } });
        await connection.sendRequest("midword/stats", {});
        const messages = shown.map((m) => m.message).join("\n");
        assert.match(messages, /midword\.serverCommand is not a setting/);
        assert.match(messages, /midword\.trace is not a setting/);
    });

    it("keeps the command line's model when the user sets other settings, and takes the user's", async () => {
        shown.length = 0; // the test before made the server complain on purpose
        // It also sent the contributed defaults, model included, as the extension did.
        let stats = (await connection.sendRequest("midword/stats", {})) as Record<string, unknown>;
        assert.equal(stats.model, "gemma3");
        const section = { ...contributedDefaults(), maxTokens: 12 };
        const set = (keys: string[]) => (key: string) => (keys.includes(key) ? { globalValue: section[key as "maxTokens"] } : nothingSet());
        await connection.sendNotification("workspace/didChangeConfiguration", { settings: { midword: serverSettings(section, set(["maxTokens"])) } });
        stats = (await connection.sendRequest("midword/stats", {})) as Record<string, unknown>;
        assert.equal(stats.model, CLI_MODEL);
        const chosen = { ...section, model: "fake-from-the-settings" };
        await connection.sendNotification("workspace/didChangeConfiguration", { settings: { midword: serverSettings(chosen, (key) => (key === "model" ? { globalValue: chosen.model } : nothingSet())) } });
        stats = (await connection.sendRequest("midword/stats", {})) as Record<string, unknown>;
        assert.equal(stats.model, "fake-from-the-settings");
        // The user removes the setting: back to the command line's model.
        await connection.sendNotification("workspace/didChangeConfiguration", { settings: { midword: serverSettings(section, nothingSet) } });
        stats = (await connection.sendRequest("midword/stats", {})) as Record<string, unknown>;
        assert.equal(stats.model, CLI_MODEL);
        await waitFor("status ready", () => (statuses[statuses.length - 1]?.state === "ready" ? true : undefined));
        assert.deepEqual(shown, [], `server complained: ${JSON.stringify(shown)}\n${stderr}`);
    });

    it("answers midword/stats with an object for the stats view", async () => {
        const stats = (await connection.sendRequest("midword/stats", {})) as Record<string, unknown>;
        assert.equal(stats.model, CLI_MODEL);
        assert.equal(typeof stats.requests, "number");
        assert.equal(stats.state, "ready");
    });
});
