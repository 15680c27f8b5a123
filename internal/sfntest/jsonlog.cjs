// Preloaded into local-sfn's CLI (node --require) by package sfntest.
//
// The CLI prints the result of each execution with console.log, which
// formats objects with util.inspect: not JSON, and nested values beyond a
// depth of two come out as [Object]. Print JSON instead. The CLI prints a
// failed execution's error message the same way, so it comes out as a JSON
// string; the exit code (0 succeeded, 2 failed) tells the two apart.
'use strict';
console.log = (...values) => {
  process.stdout.write(values.map((v) => JSON.stringify(v)).join(' ') + '\n');
};
