import { describe, expect, it } from 'vitest';

import { dashboardCode, ftMagicCode, restoreLine, UsageError } from '../src/code';
import { formatAge, formatBytes, formatRto, pythonString } from '../src/format';

describe('pythonString', () => {
  it.each([
    ['mnist', '"mnist"'],
    ['it\'s', '"it\'s"'],
    ['say "hi"', '"say \\"hi\\""'],
    ['C:\\runs\\a', '"C:\\\\runs\\\\a"'],
    ['a\nb\r\tc', '"a\\nb\\r\\tc"'],
    ['\x00\x1b\x7f', '"\\x00\\x1b\\x7f"'],
    ['line\u2028sep', '"line\\u2028sep"'],
    ['zürich-训练-🚀', '"zürich-训练-🚀"'],
    ['"); import os; os.system("x', '"\\"); import os; os.system(\\"x"'],
    ['', '""']
  ])('%j becomes %s', (input, literal) => {
    expect(pythonString(input)).toBe(literal);
  });

  it('never leaves a line break or an unescaped quote inside the literal', () => {
    const nasty = 'a"\\\n\r\u2028\u2029\u0085"b';
    const literal = pythonString(nasty);
    expect(literal).not.toMatch(/[\n\r\u2028\u2029\u0085]/);
    expect(literal.slice(1, -1)).not.toMatch(/(^|[^\\])(\\\\)*"/);
  });
});

describe('code the commands run', () => {
  it('the dashboard cell attaches to the run by an escaped name', () => {
    expect(dashboardCode('mnist')).toBe('import ft_notebook as ft\nft.attach("mnist").dashboard()');
    expect(dashboardCode('a"b')).toBe('import ft_notebook as ft\nft.attach("a\\"b").dashboard()');
  });

  it('the magic code loads the extension, then runs the line', () => {
    expect(ftMagicCode('save')).toBe(
      'get_ipython().extension_manager.load_extension("ft_notebook")\n' +
        'get_ipython().find_line_magic("ft")("save")'
    );
  });

  it('restores the latest or a named snapshot, and refuses names a line cannot hold', () => {
    expect(restoreLine()).toBe('restore');
    expect(restoreLine('before-fit.1')).toBe('restore before-fit.1');
    expect(() => restoreLine('a b')).toThrow(UsageError);
    expect(() => restoreLine('x; rm')).toThrow(/quoted/);
  });
});

describe('formatting', () => {
  it('ages', () => {
    expect(formatAge(-3)).toBe('0 s');
    expect(formatAge(59.9)).toBe('59 s');
    expect(formatAge(60)).toBe('1 min');
    expect(formatAge(7200)).toBe('2 h');
    expect(formatAge(3 * 86400)).toBe('3 d');
  });

  it('sizes and RTOs', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KB');
    expect(formatBytes(2 * 1024 ** 3)).toBe('2.0 GB');
    expect(formatRto(0.0612)).toBe('RTO 0.06 s');
    expect(formatRto(12.34)).toBe('RTO 12.3 s');
  });
});
