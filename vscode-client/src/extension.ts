// The midword extension: starts `midword serve`, connects to it over LSP (completion
// items and inline completions come from vscode-languageclient), and shows the
// server's state in the status bar.

import * as vscode from "vscode";
import {
    CloseAction,
    DidChangeConfigurationNotification,
    ErrorAction,
    ErrorHandler,
    LanguageClient,
    LanguageClientOptions,
    ServerOptions,
    State,
} from "vscode-languageclient/node";

import {
    DocumentMark,
    JsonObject,
    SECTION,
    ServerStatus,
    cannotStartMessage,
    fileIsExecutable,
    filterConfigurationChange,
    formatStats,
    isWaitingState,
    parseStatus,
    planLaunch,
    serverSettings,
    shouldAskAgainWhenReady,
    statusView,
} from "./config";

const STATUS_NOTIFICATION = "midword/status";
const STATS_REQUEST = "midword/stats";
// Restarts after a crash of a server that had been running, as vscode-languageclient's
// default does; a server that never got as far as running is not restarted at all.
const MAX_RESTARTS = 4;

class Midword implements vscode.Disposable {
    private client: LanguageClient | undefined;
    private readonly output = vscode.window.createOutputChannel("midword");
    private statsOutput: vscode.OutputChannel | undefined;
    private readonly statusItem = vscode.window.createStatusBarItem("midword.status", vscode.StatusBarAlignment.Right, 100);
    private status: ServerStatus = { state: "stopped", message: "not started" };
    // Start, stop and restart run one at a time, so that a restart command arriving
    // while the server is still starting waits for it instead of racing it.
    private lifecycle: Promise<void> = Promise.resolve();
    private readonly subscriptions: vscode.Disposable[] = [];
    // The active document as the user's last edit left it while the server could not
    // answer yet (see shouldAskAgainWhenReady).
    private typedWhileWaiting: DocumentMark | undefined;

    constructor() {
        this.statusItem.name = "midword";
        this.render();
        this.statusItem.show();
        this.subscriptions.push(
            vscode.commands.registerCommand("midword.restartServer", () => this.restart()),
            vscode.commands.registerCommand("midword.showLog", () => this.output.show(true)),
            vscode.commands.registerCommand("midword.showStats", () => this.showStats()),
            vscode.workspace.onDidChangeConfiguration((event) => {
                // The other settings reach the running server through
                // synchronize.configurationSection; these two change the process itself.
                if (
                    event.affectsConfiguration(`${SECTION}.serverCommand`) ||
                    event.affectsConfiguration(`${SECTION}.serverEnv`)
                ) {
                    void this.restart();
                } else if (event.affectsConfiguration(`${SECTION}.enable`)) {
                    this.render();
                }
            }),
            vscode.workspace.onDidChangeTextDocument((event) => {
                const active = vscode.window.activeTextEditor?.document;
                if (isWaitingState(this.status.state) && event.contentChanges.length > 0 && event.document === active) {
                    this.typedWhileWaiting = markOf(event.document);
                }
            }),
        );
    }

    start(): Promise<void> {
        return this.serialize(() => this.startClient());
    }

    restart(): Promise<void> {
        return this.serialize(async () => {
            await this.stopClient();
            await this.startClient();
        });
    }

    stop(): Promise<void> {
        return this.serialize(() => this.stopClient());
    }

    dispose(): void {
        for (const subscription of this.subscriptions) {
            subscription.dispose();
        }
        this.statusItem.dispose();
        this.statsOutput?.dispose();
        this.output.dispose();
    }

    private serialize(step: () => Promise<void>): Promise<void> {
        const next = this.lifecycle.then(step, step);
        this.lifecycle = next.catch(() => undefined);
        return next;
    }

    private async startClient(): Promise<void> {
        const config = vscode.workspace.getConfiguration(SECTION);
        const folder = vscode.workspace.workspaceFolders?.find((f) => f.uri.scheme === "file");
        const cwd = folder?.uri.fsPath;
        const plan = planLaunch(
            { serverCommand: config.get("serverCommand"), serverEnv: config.get("serverEnv") },
            { env: process.env, platform: process.platform, cwd, isExecutable: fileIsExecutable },
        );
        if (!plan.ok) {
            this.fail(plan.message);
            return;
        }
        this.output.appendLine(`[midword] starting ${plan.display} (program: ${plan.command})`);
        this.setStatus({ state: "starting", message: `starting ${plan.display}` });

        // No `transport`: vscode-languageclient would append `--stdio` to the command,
        // and the command should run exactly as the user wrote it (stdio is the default).
        const serverOptions: ServerOptions = { command: plan.command, args: plan.args, options: { env: plan.env, cwd } };
        let running = false;
        // The client's own handler, for crashes of a server that was running; it only
        // exists once the client does, hence the indirection.
        let fallback: ErrorHandler | undefined;
        const errorHandler: ErrorHandler = {
            error: (error, message, count) =>
                fallback?.error(error, message, count) ?? { action: ErrorAction.Shutdown },
            closed: () => {
                if (!running) {
                    // A command that exits at once (module missing, bad flag) would exit
                    // again on every restart; say what to fix instead of looping.
                    const message = cannotStartMessage(plan.display, "it exited before it finished starting (its output is in the midword log)");
                    this.setStatus({ state: "error", message });
                    return { action: CloseAction.DoNotRestart, message };
                }
                return fallback?.closed() ?? { action: CloseAction.DoNotRestart };
            },
        };
        const clientOptions: LanguageClientOptions = {
            documentSelector: [{ scheme: "file" }],
            outputChannel: this.output,
            synchronize: { configurationSection: SECTION },
            initializationOptions: currentServerSettings(),
            errorHandler,
            middleware: {
                sendNotification: (type, next, params) => {
                    const method = typeof type === "string" ? type : type.method;
                    return next(
                        type,
                        method === DidChangeConfigurationNotification.method ? filterConfigurationChange(params, currentServerSettings) : params,
                    );
                },
                workspace: {
                    // For a server that asks instead of being told: the same filtering.
                    configuration: async (params, token, next) => {
                        const values = await next(params, token);
                        if (!Array.isArray(values)) {
                            return values;
                        }
                        return values.map((value, i) => (params.items[i]?.section === SECTION ? currentServerSettings() : value));
                    },
                },
            },
        };
        const client = new LanguageClient("midword", "midword", serverOptions, clientOptions);
        fallback = client.createDefaultErrorHandler(MAX_RESTARTS);
        // Inline completion (textDocument/inlineCompletion) is a proposed feature in
        // vscode-languageclient 9, registered only on request.
        client.registerProposedFeatures();
        client.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
            const status = parseStatus(params);
            // A client being replaced by a restart may still deliver a last one.
            if (status !== undefined && this.client === client) {
                this.setStatus(status);
            }
        });
        client.onDidChangeState((event) => {
            if (event.newState === State.Running) {
                running = true;
            } else if (event.newState === State.Stopped && this.client === client && this.status.state !== "error") {
                this.setStatus({ state: "stopped", message: "the server is not running (run “midword: Restart Server”)" });
            }
        });
        this.client = client;
        try {
            await client.start();
        } catch (error) {
            // vscode-languageclient has already logged it and told the user.
            this.output.appendLine(`[midword] start failed: ${error instanceof Error ? error.message : String(error)}`);
            if (this.status.state !== "error") {
                this.fail(cannotStartMessage(plan.display, error instanceof Error ? error.message : String(error)));
            }
        }
    }

    private async stopClient(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        if (client === undefined) {
            return;
        }
        try {
            // A server busy in a model step may take a moment to answer shutdown.
            await client.dispose(5000);
        } catch (error) {
            this.output.appendLine(`[midword] stopping the server: ${error instanceof Error ? error.message : String(error)}`);
        }
        this.setStatus({ state: "stopped", message: "stopped" });
    }

    private fail(message: string): void {
        this.output.appendLine(`[midword] ${message}`);
        this.setStatus({ state: "error", message });
        void vscode.window.showErrorMessage(message, "Open Settings", "Show Log").then((choice) => {
            if (choice === "Open Settings") {
                void vscode.commands.executeCommand("workbench.action.openSettings", "midword.serverCommand");
            } else if (choice === "Show Log") {
                this.output.show(true);
            }
        });
    }

    private setStatus(status: ServerStatus): void {
        const previous = this.status.state;
        this.status = status;
        this.render();
        const typed = this.typedWhileWaiting;
        if (!isWaitingState(status.state)) {
            this.typedWhileWaiting = undefined;
        }
        const editor = vscode.window.activeTextEditor;
        if (
            vscode.workspace.getConfiguration(SECTION).get<boolean>("enable", true) &&
            shouldAskAgainWhenReady(previous, status.state, typed, editor === undefined ? undefined : markOf(editor.document))
        ) {
            this.output.appendLine("[midword] the model is ready: asking again for the text typed while it loaded");
            void vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
        }
    }

    private render(): void {
        const enabled = vscode.workspace.getConfiguration(SECTION).get<boolean>("enable", true);
        const view = statusView(this.status, enabled);
        this.statusItem.text = view.text;
        this.statusItem.tooltip = view.tooltip;
        // Without it a screen reader says only "midword", whatever the state.
        this.statusItem.accessibilityInformation = { label: view.label, role: "button" };
        this.statusItem.command = view.command;
        this.statusItem.backgroundColor =
            view.severity === "normal" ? undefined : new vscode.ThemeColor(`statusBarItem.${view.severity}Background`);
    }

    private async showStats(): Promise<void> {
        const client = this.client;
        if (client === undefined || client.state !== State.Running) {
            const choice = await vscode.window.showWarningMessage("midword: the server is not running.", "Restart Server", "Show Log");
            if (choice === "Restart Server") {
                await this.restart();
            } else if (choice === "Show Log") {
                this.output.show(true);
            }
            return;
        }
        let stats: unknown;
        try {
            stats = await client.sendRequest(STATS_REQUEST, {});
        } catch (error) {
            void vscode.window.showErrorMessage(`midword: ${STATS_REQUEST} failed: ${error instanceof Error ? error.message : String(error)}`);
            return;
        }
        this.statsOutput ??= vscode.window.createOutputChannel("midword stats", "json");
        this.statsOutput.replace(formatStats(stats, new Date()));
        this.statsOutput.show(true);
    }
}

function markOf(document: vscode.TextDocument): DocumentMark {
    return { uri: document.uri.toString(), version: document.version };
}

/** The settings to send the server now: what the user set, `null` for the rest. */
function currentServerSettings(): JsonObject {
    const config = vscode.workspace.getConfiguration(SECTION);
    return serverSettings(vscode.workspace.getConfiguration().get(SECTION), (key) => config.inspect(key));
}

let midword: Midword | undefined;

export function activate(context: vscode.ExtensionContext): void {
    midword = new Midword();
    context.subscriptions.push(midword);
    // Not awaited: activation should not wait for a Python process to come up.
    void midword.start();
}

export async function deactivate(): Promise<void> {
    await midword?.stop();
    midword = undefined;
}
