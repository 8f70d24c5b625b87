// checks.mjs: what the Node drivers share: a check is a named async
// function that returns nothing when it holds, else why not (or throws);
// each prints "ok   node: NAME" or "FAIL node: NAME: WHY", and done()
// prints the last line the shell tests read, "NODE <passed> <failed>".
let passed = 0, failed = 0;
export const ok = (name) => { console.log(`ok   node: ${name}`); passed++; };
export const fail = (name, why) => { console.log(`FAIL node: ${name}: ${why}`); failed++; };
export async function check(name, fn) {
  try {
    const why = await fn();
    if (why) fail(name, why); else ok(name);
  } catch (e) {
    fail(name, `threw ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
  }
}
export const done = () => console.log(`NODE ${passed} ${failed}`);
// a value in a failure message, cut short
export const J = (x) => JSON.stringify(x).slice(0, 400);
