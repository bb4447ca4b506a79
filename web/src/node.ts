/**
 * Node storage for deniable-client: the queue in one JSON file and the device secret in a
 * 32-byte file, both mode 0600.
 *
 *     import {Reporter} from "deniable-client";
 *     import {nodeStorage} from "deniable-client/node";
 *     const reporter = new Reporter(url, {token, ...nodeStorage("/var/lib/myapp/deniable")});
 *
 * `nodeStorage(dir)` uses `<dir>/queue.json` and `<dir>/privacy/secret`: the layout of the
 * Python client's privacy directory, so a Python and a Node client given the same directory
 * share one secret and give the same memoized answers. Every write goes to a temporary file
 * that is fsynced and renamed over the old one: after a crash the file holds the old or the
 * new document, never a mix. One process per queue file (updates are serialised within it).
 */
import {randomBytes} from "node:crypto";
import {constants, promises as fs} from "node:fs";
import {dirname, join} from "node:path";

import {QueueError} from "./errors.js";
import {importSecret, SECRET_BYTES} from "./memo.js";
import type {SecretStore} from "./secret.js";
import type {Store} from "./store.js";

const FILE_MODE = 0o600;
const DIR_MODE = 0o700;

async function writeAtomically(path: string, data: string | Uint8Array): Promise<void> {
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  const handle = await fs.open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL,
                               FILE_MODE);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.rename(tmp, path);
}

/** A Store in one JSON file (created 0600, its directory 0700). */
export class FileStore implements Store {
  private data: Promise<Record<string, unknown>> | undefined;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(readonly path: string) {}

  private read(): Promise<Record<string, unknown>> {
    this.data ??= (async () => {
      await fs.mkdir(dirname(this.path), {recursive: true, mode: DIR_MODE});
      try {
        return JSON.parse(await fs.readFile(this.path, "utf8")) as Record<string, unknown>;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
        throw new QueueError(`the queue file ${this.path} is unreadable: ${String(error)}`);
      }
    })();
    return this.data;
  }

  private serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.chain.then(task, task);
    this.chain = run.catch(() => undefined);
    return run;
  }

  async get<T>(key: string): Promise<T | undefined> {
    const data = await this.serial(() => this.read());
    return data[key] === undefined ? undefined : structuredClone(data[key]) as T;
  }

  set(key: string, value: unknown): Promise<void> {
    return this.serial(async () => {
      const data = await this.read();
      await this.write({...data, [key]: value});
    });
  }

  update<T>(key: string, fn: (old: T | undefined) => T): Promise<T> {
    return this.serial(async () => {
      const data = await this.read();
      const old = data[key] === undefined ? undefined : structuredClone(data[key]) as T;
      const value = fn(old);
      await this.write({...data, [key]: value});
      return value;
    });
  }

  del(key: string): Promise<void> {
    return this.serial(async () => {
      const {[key]: _, ...rest} = await this.read();
      await this.write(rest);
    });
  }

  private async write(data: Record<string, unknown>): Promise<void> {
    try {
      await writeAtomically(this.path, JSON.stringify(data));
    } catch (error) {
      throw new QueueError(`the queue file ${this.path} could not be written: ${String(error)}`);
    }
    this.data = Promise.resolve(data);
  }
}

/**
 * The device secret in a file of 32 raw bytes, mode 0600 (the Python client's format). Created
 * once, atomically: written to a temporary file, fsynced, then hard-linked into place, which
 * fails if another process won the race (its secret is used then).
 */
export class FileSecret implements SecretStore {
  private key: Promise<CryptoKey> | undefined;

  constructor(readonly path: string) {}

  load(): Promise<CryptoKey> {
    this.key ??= this.loadOnce();
    return this.key;
  }

  /** Delete the secret file (consent withdrawn). */
  async clear(): Promise<void> {
    this.key = undefined;
    await fs.rm(this.path, {force: true});
  }

  private async loadOnce(): Promise<CryptoKey> {
    await fs.mkdir(dirname(this.path), {recursive: true, mode: DIR_MODE});
    let bytes: Uint8Array;
    try {
      bytes = await fs.readFile(this.path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      const tmp = `${this.path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
      await writeAtomically(tmp, randomBytes(SECRET_BYTES));
      try {
        await fs.link(tmp, this.path);
      } catch (linkError) {
        if ((linkError as NodeJS.ErrnoException).code !== "EEXIST") throw linkError;
      } finally {
        await fs.unlink(tmp);
      }
      bytes = await fs.readFile(this.path);
    }
    if (bytes.length !== SECRET_BYTES) {
      throw new QueueError(`the device secret ${this.path} must be ${SECRET_BYTES} bytes; ` +
                           `it has ${bytes.length}. Refusing to start afresh.`);
    }
    return importSecret(new Uint8Array(bytes));
  }
}

/** The store and secret of a Node app: `<dir>/queue.json` and `<dir>/privacy/secret`. */
export function nodeStorage(dir: string): {store: FileStore; secret: FileSecret} {
  return {store: new FileStore(join(dir, "queue.json")),
          secret: new FileSecret(join(dir, "privacy", "secret"))};
}
