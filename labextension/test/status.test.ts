import { describe, expect, it } from 'vitest';

import { formatStatus } from '../src/status';

describe('formatStatus', () => {
  it('formats healthy/total counts', () => {
    expect(formatStatus(3, 3)).toBe('FT ● 3/3');
    expect(formatStatus(0, 2)).toBe('FT ● 0/2');
  });

  it('rejects impossible counts', () => {
    expect(() => formatStatus(4, 3)).toThrow(RangeError);
    expect(() => formatStatus(-1, 3)).toThrow(RangeError);
    expect(() => formatStatus(1.5, 3)).toThrow(RangeError);
  });
});
