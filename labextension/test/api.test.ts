import { describe, expect, it } from 'vitest';

import { errorFromResponse, SERVER_EXTENSION_MISSING_MESSAGE } from '../src/api';

describe('errorFromResponse', () => {
  it.each(['clusters', 'runs'])(
    'a 404 page on %s (whichever answers first) means the server extension is missing',
    route => {
      const error = errorFromResponse(route, 404, '<html>404: Not Found</html>');
      expect(error.kind).toBe('server-extension-missing');
      expect(error.message).toBe(SERVER_EXTENSION_MISSING_MESSAGE);
      expect(error.message).toContain('jupyter server extension enable ft_notebook');
    }
  );

  it('a 404 elsewhere is the server\'s own answer, with its message', () => {
    const body = JSON.stringify({ message: 'No cluster named "x".', reason: 'NotFound' });
    const error = errorFromResponse('workers', 404, body);
    expect(error.kind).toBe('http');
    expect(error.message).toBe('No cluster named "x".');
    expect(error.reason).toBe('NotFound');
  });

  it('a 503 means the cluster is unreachable', () => {
    const body = JSON.stringify({ message: 'The scheduler does not answer.', reason: 'Unavailable' });
    const error = errorFromResponse('workers', 503, body);
    expect(error.kind).toBe('unreachable');
    expect(error.status).toBe(503);
    expect(error.message).toBe('The scheduler does not answer.');
  });

  it('a body that is not an ErrorModel still gives a message with the status', () => {
    const error = errorFromResponse('runs', 502, 'Bad Gateway');
    expect(error.kind).toBe('http');
    expect(error.message).toContain('502');
    expect(error.message).toContain('ft-notebook/api/runs');
  });
});
