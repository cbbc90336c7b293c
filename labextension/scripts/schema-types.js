/**
 * Writes src/report-schema.ts, the TypeScript types of the report JSON, from the one source of
 * truth: nbcompile/schema/report.schema.json (itself generated from the Python dataclasses).
 * `npm run schema-types` (or `make schema`) rewrites it; test/schema-types.test.ts checks it is current.
 */
const fs = require('fs');
const path = require('path');
const { compile } = require('json-schema-to-typescript');

const SCHEMA = path.join(__dirname, '..', '..', 'nbcompile', 'schema', 'report.schema.json');
const OUT = path.join(__dirname, '..', 'src', 'report-schema.ts');
const BANNER = [
  '/**',
  ' * Generated from nbcompile/schema/report.schema.json by `npm run schema-types` (`make schema`).',
  ' * Do not edit: change the dataclasses in nbcompile/report.py and regenerate.',
  ' */'
].join('\n');

/** The TypeScript source for the schema at `schemaPath`. */
async function generate(schemaPath = SCHEMA) {
  const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf8'));
  return compile(schema, 'NbcompileReport', {
    bannerComment: BANNER,
    unknownAny: true,
    additionalProperties: false,
    cwd: path.dirname(schemaPath),
    style: { singleQuote: true, printWidth: 120 }
  });
}

module.exports = { generate, SCHEMA, OUT };

if (require.main === module) {
  generate(process.argv[2] || SCHEMA).then(ts => {
    const out = process.argv[3] || OUT;
    fs.writeFileSync(out, ts);
    console.log(`wrote ${path.relative(process.cwd(), out)}`);
  });
}
