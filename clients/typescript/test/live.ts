/** Where the live service is: set by tests/integration/test_typescript_client.py (never skipped when unset). */

import { randomUUID } from "node:crypto";
import { createServer } from "node:net";

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
