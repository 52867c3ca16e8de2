import { gzipSync } from 'node:zlib';
import { defineConfig, type Plugin } from 'vite';

// During `npm run dev`, API calls, the event stream and terminal sockets go to a running
// `agenthold serve` (AGENTHOLD_DEV_SERVER, default http://127.0.0.1:8080).
const target = process.env.AGENTHOLD_DEV_SERVER ?? 'http://127.0.0.1:8080';

/** Write `name.gz` next to each script and stylesheet; the server sends it to browsers that accept gzip. */
function precompress(): Plugin {
  return {
    name: 'agenthold-precompress',
    apply: 'build',
    generateBundle(_options, bundle) {
      for (const [name, item] of Object.entries(bundle)) {
        if (!/\.(js|css|svg)$/.test(name)) continue;
        const source = item.type === 'chunk' ? item.code : item.source;
        const bytes = typeof source === 'string' ? Buffer.from(source) : Buffer.from(source);
        if (bytes.length < 1024) continue;
        this.emitFile({ type: 'asset', fileName: `${name}.gz`, source: gzipSync(bytes, { level: 9 }) });
      }
    },
  };
}

export default defineConfig({
  base: '/',
  plugins: [precompress()],
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: {
      '/api': { target, changeOrigin: false, ws: true },
    },
  },
});
