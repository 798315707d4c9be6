import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // the renderers build real DOM nodes
    environment: 'jsdom'
  }
});
