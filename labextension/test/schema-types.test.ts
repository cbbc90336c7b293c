/**
 * @jest-environment node
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const ROOT = path.join(__dirname, '..');
const SCHEMA = path.join(ROOT, '..', 'nbcompile', 'schema', 'report.schema.json');

// The generator runs in its own node: prettier, which it formats with, needs real dynamic imports.
function generate(schema: string): string {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nbcompile-schema-')), 'report-schema.ts');
  execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'schema-types.js'), schema, out], { stdio: 'pipe' });
  return fs.readFileSync(out, 'utf8');
}

test('src/report-schema.ts is what the report JSON schema generates (npm run schema-types)', () => {
  expect(fs.readFileSync(path.join(ROOT, 'src', 'report-schema.ts'), 'utf8')).toBe(generate(SCHEMA));
}, 60000);

test('a field added to the schema shows in the generated types', () => {
  const schema = JSON.parse(fs.readFileSync(SCHEMA, 'utf8'));
  schema.$defs.Check.properties.new_field = { type: 'string' };
  schema.$defs.Check.required.push('new_field');
  const changed = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nbcompile-schema-')), 'report.schema.json');
  fs.writeFileSync(changed, JSON.stringify(schema));
  expect(generate(changed)).toMatch(/export interface Check \{[^}]*new_field: string;/);
}, 60000);
