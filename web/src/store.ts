/**
 * Durable key-value stores for the queue, the cached catalogue and the device secret.
 *
 * `IdbStore` is IndexedDB in the idb-keyval style: one object store, one transaction per call;
 * `update` reads and writes in the same transaction, so tabs sharing the database never lose
 * or double an update. `MemoryStore` keeps nothing across restarts. The Node file store lives
 * in `deniable-client/node`.
 */
import {QueueError} from "./errors.js";

/** What the reporter needs from a store. Values are structured-cloneable (or JSON, in Node). */
export interface Store {
  get<T>(key: string): Promise<T | undefined>;
  set(key: string, value: unknown): Promise<void>;
  /** Read-modify-write, atomic against other users of the same store. Returns the new value. */
  update<T>(key: string, fn: (old: T | undefined) => T): Promise<T>;
  del(key: string): Promise<void>;
}

/** A store in memory: for tests, and where no durable storage exists. */
export class MemoryStore implements Store {
  private readonly data = new Map<string, unknown>();

  async get<T>(key: string): Promise<T | undefined> {
    return structuredClone(this.data.get(key)) as T | undefined;
  }
  async set(key: string, value: unknown): Promise<void> {
    this.data.set(key, structuredClone(value));
  }
  async update<T>(key: string, fn: (old: T | undefined) => T): Promise<T> {
    const value = fn(structuredClone(this.data.get(key)) as T | undefined);
    this.data.set(key, structuredClone(value));
    return value;
  }
  async del(key: string): Promise<void> {
    this.data.delete(key);
  }
}

function promised<T>(request: IDBRequest<T> | IDBTransaction): Promise<T> {
  return new Promise((resolve, reject) => {
    const r = request as IDBRequest<T> & IDBTransaction;
    r.oncomplete = r.onsuccess = () => resolve(r.result);
    r.onabort = r.onerror = () => reject(r.error);
  });
}

/** IndexedDB: database `name` (default "deniable"), object store "kv". */
export class IdbStore implements Store {
  private readonly db: Promise<IDBDatabase>;

  constructor(name = "deniable") {
    const request = globalThis.indexedDB.open(name);
    request.onupgradeneeded = () => request.result.createObjectStore("kv");
    this.db = promised(request);
  }

  private async run<T>(mode: IDBTransactionMode,
                       body: (store: IDBObjectStore) => T | Promise<T>): Promise<T> {
    try {
      const tx = (await this.db).transaction("kv", mode);
      const result = await body(tx.objectStore("kv"));
      await promised(tx);
      return result;
    } catch (error) {
      throw new QueueError(`IndexedDB failed: ${String(error)}`);
    }
  }

  get<T>(key: string): Promise<T | undefined> {
    return this.run("readonly", (s) => promised(s.get(key)) as Promise<T | undefined>);
  }
  set(key: string, value: unknown): Promise<void> {
    return this.run("readwrite", (s) => void s.put(value, key));
  }
  update<T>(key: string, fn: (old: T | undefined) => T): Promise<T> {
    return this.run("readwrite", (s) => new Promise<T>((resolve, reject) => {
      const request = s.get(key);
      request.onsuccess = () => {
        try {
          const value = fn(request.result as T | undefined);
          s.put(value, key);
          resolve(value);
        } catch (error) {
          reject(error);
        }
      };
      request.onerror = () => reject(request.error);
    }));
  }
  del(key: string): Promise<void> {
    return this.run("readwrite", (s) => void s.delete(key));
  }
}

/** IndexedDB where there is one (browsers), else memory. */
export function defaultStore(): Store {
  return typeof globalThis.indexedDB === "undefined" ? new MemoryStore() : new IdbStore();
}
