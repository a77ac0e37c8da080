// package.json's contributed settings, read the way VS Code presents them.

import * as fs from "node:fs";
import * as path from "node:path";

import { SECTION } from "../config";

interface Property {
    default?: unknown;
    scope?: string;
}

function properties(): Record<string, Property> {
    // Compiled to out/test/, two levels below the package root.
    const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));
    return manifest.contributes.configuration.properties;
}

/** The contributed keys under `midword.`, without the prefix (`maxTokens`, `trace.server`). */
export function contributedKeys(): string[] {
    return Object.keys(properties())
        .filter((key) => key.startsWith(`${SECTION}.`))
        .map((key) => key.slice(SECTION.length + 1));
}

/** The `midword` section with every setting at its default, as an object: what
 * `workspace.getConfiguration().get("midword")` returns when nothing is set
 * (dotted keys nest, so `trace.server` is `{trace: {server: ...}}`). */
export function contributedDefaults(): Record<string, unknown> {
    const section: Record<string, unknown> = {};
    for (const [key, property] of Object.entries(properties())) {
        if (!key.startsWith(`${SECTION}.`)) {
            continue;
        }
        const parts = key.slice(SECTION.length + 1).split(".");
        let node = section;
        for (const part of parts.slice(0, -1)) {
            node = (node[part] ??= {}) as Record<string, unknown>;
        }
        node[parts[parts.length - 1]] = property.default;
    }
    return section;
}

/** Each contributed key's `scope` (VS Code's default when it has none: "window"). */
export function contributedScopes(): Record<string, string> {
    const scopes: Record<string, string> = {};
    for (const [key, property] of Object.entries(properties())) {
        if (key.startsWith(`${SECTION}.`)) {
            scopes[key.slice(SECTION.length + 1)] = property.scope ?? "window";
        }
    }
    return scopes;
}
