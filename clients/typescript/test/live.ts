/** Where the live service is: set by tests/integration/test_typescript_client.py (never skipped when unset). */

import { randomUUID } from "node:crypto";
import { createServer, type Socket } from "node:net";

import { Client, type ClientOptions } from "pgcontext";

export function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through tests/integration/test_typescript_client.py`);
  return value;
}

export const url = (): string => required("PGCONTEXT_URL");
export const apiKey = (): string => required("PGCONTEXT_API_KEY");

export function client(options: ClientOptions = {}): Client {
  return new Client({ url: url(), apiKey: apiKey(), ...options });
}

export function agent(prefix = "ts"): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** A loopback port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

/** A fetch that records every request's method, path, headers, body and answer status, then sends it for real. */
export class Recorder {
  readonly sent: Array<{ method: string; path: string; headers: Headers; body: string; status: number | null }> = [];

  readonly fetch: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const entry = { method: request.method, path: new URL(request.url).pathname, headers: request.headers,
      body: await request.text(), status: null as number | null };
    this.sent.push(entry);
    const response = await fetch(input, init);
    entry.status = response.status;
    return response;
  };
}

/** A loopback listener that accepts connections and never answers (a hung service); `close()` ends it. */
export async function silentListener(): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("no port");
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: () => new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    }),
  };
}

/**
 * A fetch whose answers are the live service's, with the body of each passed through `cut` first: what a
 * proxy or a broken connection does to a streamed answer.
 */
export function cutting(cut: (body: string) => string): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    const body = cut(await response.text());
    return new Response(body, { status: response.status, headers: response.headers });
  };
}
