/**
 * Where the device secret lives. Browsers: a non-extractable HMAC key in IndexedDB (page
 * scripts can use it but never read its bytes). Node: a 32-byte file, mode 0600
 * (`deniable-client/node`), the same format as the Python client's `<privacy dir>/secret`, so
 * both clients sharing a secret give the same memoized answers.
 */
import {newSecretKey} from "./memo.js";
import type {Store} from "./store.js";

export interface SecretStore {
  /** The device's HMAC key, created on first use and the same on every later call. */
  load(): Promise<CryptoKey>;
  /** Delete the secret (consent withdrawn): the next load() creates a new one. */
  clear(): Promise<void>;
}

/** A secret kept in a Store (IndexedDB): created once, atomically (the first writer wins). */
export class StoreSecret implements SecretStore {
  constructor(private readonly store: Store, private readonly key = "secret") {}

  async load(): Promise<CryptoKey> {
    const found = await this.store.get<CryptoKey>(this.key);
    if (found !== undefined) return found;
    const fresh = await newSecretKey();
    return this.store.update<CryptoKey>(this.key, (old) => old ?? fresh);
  }

  clear(): Promise<void> {
    return this.store.del(this.key);
  }
}

/** A secret for this object's life only: memoized answers last as long as the Reporter. */
export class MemorySecret implements SecretStore {
  private key: Promise<CryptoKey> | undefined;

  load(): Promise<CryptoKey> {
    this.key ??= newSecretKey();
    return this.key;
  }

  async clear(): Promise<void> {
    this.key = undefined;
  }
}
