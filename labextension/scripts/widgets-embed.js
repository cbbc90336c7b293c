// Copies the ipywidgets 8 HTML widget manager (the standalone embed.js of
// @jupyter-widgets/html-manager) into the Python package: `python -m nbcompile run --html` puts it
// inline, so an exported notebook's panels render with no network.
const fs = require('fs');
const path = require('path');

const pkg = path.dirname(require.resolve('@jupyter-widgets/html-manager/package.json'));
const source = path.join(pkg, 'dist', 'embed.js');
const target = path.join(__dirname, '..', '..', 'nbcompile', 'static', 'widgets-embed.js');
fs.mkdirSync(path.dirname(target), { recursive: true });
fs.copyFileSync(source, target);
console.log(`widgets-embed: ${path.relative(process.cwd(), target)} (${fs.statSync(target).size} bytes)`);
