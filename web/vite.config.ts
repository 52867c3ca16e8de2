import { defineConfig } from 'vite';

// During `npm run dev`, API calls, the event stream and terminal sockets go to a running
// `agenthold serve` (AGENTHOLD_DEV_SERVER, default http://127.0.0.1:8080).
const target = process.env.AGENTHOLD_DEV_SERVER ?? 'http://127.0.0.1:8080';

export default defineConfig({
  base: '/',
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
