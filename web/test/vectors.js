// The shared test vectors (tests/vectors/vectors.json, written from the Python client) and a
// random source that replays their words, for vectors.test.js and kinds-vectors.test.js.
import {readFileSync} from "node:fs";
import {SecureBits} from "../dist/random.js";


export const vectors = JSON.parse(
  readFileSync(new URL("../../tests/vectors/vectors.json", import.meta.url)));
export const fromHex = (text) => new Uint8Array(Buffer.from(text, "hex"));

/** SecureBits reading exactly these 64-bit words (little-endian), as the generator does. */
export function source(words) {
  const stream = Buffer.concat(words.map((w) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(`0x${w}`));
    return b;
  }));
  let given = false;
  return new SecureBits(() => {
    if (given) throw new Error("the vector's words ran out");
    given = true;
    return new Uint8Array(stream);
  });
}
