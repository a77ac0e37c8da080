// Drives a running code-server (a whole VS Code in the browser) through headless
// Chromium the way a user would: open files, type, look at the ghost text, press Tab,
// save. Called by tests/e2e/test_vscode_e2e.py, which starts code-server with the
// extension installed and checks what this script reports and what it saved.
//
//   node drive.js config.json
//
// config: {url, out, userSettings, timeoutMs, python, and optionally early, json,
// errorModel} where early/python/json are {file, type}: open `file`, put the cursor at
// its end, type `type`, then (unless `accept` is false) press Tab and save. `early` is typed while the server is still loading the model;
// `errorModel` is then set as midword.model, which must turn the status to error. Writes
// out/results.json and screenshots (out/*.png); exits non-zero with a message (and
// out/failure.png) when a step does not happen in time.

"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");

const config = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = config.out;
const timeout = config.timeoutMs;
const results = { steps: [] };
const started = Date.now();

function note(step, detail = {}) {
    const entry = { step, atMs: Date.now() - started, ...detail };
    results.steps.push(entry);
    console.log(JSON.stringify(entry));
}

// The status bar item (VS Code's id for it: "<extension id>.<item id>"); the extension
// sets its accessible label to "midword: <state> — <message>", which is also what a
// screen reader says.
function statusItem(page) {
    return page.locator('[id="midword.midword.midword.status"]');
}

async function statusLabel(page) {
    return statusItem(page).evaluate(
        (item) => item.querySelector("[aria-label]")?.getAttribute("aria-label") ?? item.getAttribute("aria-label") ?? "",
        undefined,
        { timeout },
    );
}

async function waitForState(page, states, ms = timeout) {
    const deadline = Date.now() + ms;
    let label = "";
    while (Date.now() < deadline) {
        label = await statusLabel(page).catch(() => "");
        const state = label.slice("midword: ".length).split(" ")[0];
        if (states.includes(state)) {
            return label;
        }
        if (state === "error") {
            throw new Error(`status is error, waiting for ${states.join("/")}: ${JSON.stringify(label)}`);
        }
        await page.waitForTimeout(100);
    }
    throw new Error(`status never reached ${states.join("/")} in ${ms} ms; last: ${JSON.stringify(label)}`);
}

async function shootStatus(page, name) {
    await statusItem(page).screenshot({ path: path.join(out, `status-${name}.png`) });
    await page.screenshot({ path: path.join(out, `window-${name}.png`) });
}

async function openFile(page, file) {
    await page.keyboard.press("Control+P");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible", timeout });
    await input.fill(file);
    // The file list fills in asynchronously; Enter on an empty list would do nothing.
    await page.locator(".quick-input-list .monaco-list-row", { hasText: file }).first().waitFor({ timeout });
    await page.keyboard.press("Enter");
    await page.locator(`.tab.active[aria-label*="${file}"]`).waitFor({ timeout });
    await page.locator(".monaco-editor.focused").waitFor({ timeout });
}

async function runCommand(page, title) {
    await page.keyboard.press("F1");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible", timeout });
    await input.fill(`>${title}`);
    await page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first().waitFor({ timeout });
    await page.keyboard.press("Enter");
}

async function typeAtEnd(page, text) {
    await page.keyboard.press("Control+End");
    await page.keyboard.type(text, { delay: 40 });
}

/** The ghost text once some is shown: the first line inline, later lines below it. */
async function ghostText(page) {
    const ghost = page.locator(".monaco-editor.focused .ghost-text-decoration, .monaco-editor.focused .ghost-text");
    await ghost.first().waitFor({ state: "visible", timeout });
    const parts = await ghost.allTextContents();
    return parts.join("\n");
}

async function acceptAndSave(page, file) {
    await page.keyboard.press("Tab");
    await page.locator(".monaco-editor.focused .ghost-text-decoration").waitFor({ state: "detached", timeout });
    await page.keyboard.press("Control+S");
    await page.locator(`.tab.active[aria-label*="${file}"]:not(.dirty)`).waitFor({ timeout });
}

async function complete(page, name, spec, { shoot } = {}) {
    await openFile(page, spec.file);
    const label = await statusLabel(page);
    await typeAtEnd(page, spec.type);
    note(`${name}: typed`, { status: label });
    const ghost = await ghostText(page);
    note(`${name}: ghost text`, { ghost });
    if (shoot) {
        await page.locator(".monaco-editor.focused").screenshot({ path: path.join(out, shoot) });
    }
    if (spec.accept !== false) {
        await acceptAndSave(page, spec.file);
        note(`${name}: accepted and saved`);
    }
    results[name] = { statusWhenTyped: label, ghost };
}

async function main() {
    const browser = await chromium.launch({
        executablePath: config.chromium ?? "/usr/bin/chromium",
        headless: true,
        // Chromium's sandbox needs user namespaces, which a container running as root lacks.
        args: ["--no-sandbox"],
    });
    const page = await browser.newPage({ viewport: { width: 1100, height: 620 } });
    page.setDefaultTimeout(timeout);
    try {
        await page.goto(config.url);
        await page.locator(".monaco-workbench").waitFor({ timeout });
        note("workbench loaded");
        if (config.early) {
            // Typing before the model is ready: the server must hold the request until it is.
            const loading = await waitForState(page, ["loading"]);
            note("server loading", { status: loading });
            await shootStatus(page, "loading");
            await complete(page, "early", config.early);
        }

        const ready = await waitForState(page, ["ready"]);
        note("server ready", { status: ready });
        await shootStatus(page, "ready");
        await complete(page, "python", config.python, { shoot: "ghost-text.png" });
        if (config.json) {
            await complete(page, "json", config.json);
        }

        if (config.errorModel) {
            // A model that cannot load: the error state. Set as a user would, in the user
            // settings.json opened from the command palette (VS Code in the browser does
            // not notice the file changing on disk).
            const settings = JSON.parse(fs.readFileSync(config.userSettings, "utf8"));
            settings["midword.model"] = config.errorModel;
            await runCommand(page, "Preferences: Open User Settings (JSON)");
            await page.locator('.tab.active[aria-label*="settings.json"]').waitFor({ timeout });
            await page.locator(".monaco-editor.focused").waitFor({ timeout });
            await page.keyboard.press("Control+A");
            await page.keyboard.insertText(JSON.stringify(settings));
            await page.keyboard.press("Control+S");
            await page.locator('.tab.active[aria-label*="settings.json"]:not(.dirty)').waitFor({ timeout });
            const error = await waitForState(page, ["error"]);
            note("server error", { status: error });
            await shootStatus(page, "error");
            results.error = { status: error };
        }
    } catch (error) {
        await page.screenshot({ path: path.join(out, "failure.png") }).catch(() => undefined);
        results.statusBar = await page
            .locator(".statusbar-item")
            .evaluateAll((items) => items.map((item) => ({ id: item.id, label: item.querySelector("[aria-label]")?.getAttribute("aria-label") ?? item.getAttribute("aria-label") })))
            .catch(() => []);
        results.failure = error instanceof Error ? error.message : String(error);
        throw error;
    } finally {
        fs.writeFileSync(path.join(out, "results.json"), JSON.stringify(results, null, 2));
        await browser.close();
    }
}

main().catch((error) => {
    console.error(error instanceof Error ? error.stack : String(error));
    process.exit(1);
});
