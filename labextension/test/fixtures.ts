/** Models as the server sends them, with defaults a test overrides field by field. */
import type {
  ClusterModel,
  RecoveryModel,
  ReplicaModel,
  RunModel,
  ServiceModel,
  SnapshotModel,
  WorkerStatus
} from '../src/models';

export function worker(overrides: Partial<WorkerStatus> = {}): WorkerStatus {
  return {
    name: 'w0',
    address: 'tcp://127.0.0.1:40001',
    state: 'running',
    pid: 1234,
    gpu: null,
    heartbeat_age_s: 1.2,
    rss: 512 * 1024 * 1024,
    memory_limit: 4 * 1024 * 1024 * 1024,
    tasks: 0,
    restarts: 0,
    cause: '',
    gpu_memory_used: null,
    gpu_memory_total: null,
    gpu_utilization: null,
    gpu_temperature: null,
    gpu_ecc_uncorrected: null,
    ...overrides
  };
}

export function cluster(overrides: Partial<ClusterModel> = {}): ClusterModel {
  return {
    name: 'c1',
    address: 'tcp://127.0.0.1:8786',
    pid: 99,
    started: 1_700_000_000,
    gpus: [],
    workers: { w0: 1234, w1: 1235 },
    dashboard: null,
    ...overrides
  };
}

export function recovery(overrides: Partial<RecoveryModel> = {}): RecoveryModel {
  return {
    time: 1_700_000_100,
    cause: 'worker-lost',
    rto_s: 0.0612,
    steps_lost: 3,
    workers_before: 4,
    workers_after: 3,
    detected_at: 1_700_000_099.94,
    how: 'survive',
    generation: 2,
    step: 117,
    verified: true,
    ...overrides
  };
}

export function run(overrides: Partial<RunModel> = {}): RunModel {
  return {
    name: 'mnist',
    topic: 'ft-run-mnist',
    state: 'RUNNING',
    health: 'HEALTHY',
    last_seq: 10,
    updated: 1_700_000_200,
    step: 120,
    total_steps: 1000,
    world_size: 4,
    loss: 0.123456,
    checkpoint_step: 100,
    checkpoint_time: 1_700_000_188,
    recoveries: [],
    cluster: 'default',
    cluster_gone: false,
    ...overrides
  };
}

export function snapshot(overrides: Partial<SnapshotModel> = {}): SnapshotModel {
  return {
    name: 'latest',
    step: 3,
    time: 1_700_000_140,
    cell: 7,
    size: 2048,
    variables: ['model', 'df'],
    pinned: false,
    renamed_from: '',
    ...overrides
  };
}

/** "Now" in the tests: 12 s after `run()`'s checkpoint, in browser milliseconds. */
export const NOW_MS = 1_700_000_200_000;

export function replica(overrides: Partial<ReplicaModel> = {}): ReplicaModel {
  return {
    replica: 'ranker/0',
    worker: '0',
    state: 'ready',
    since: NOW_MS / 1000 - 30,
    cause: '',
    ...overrides
  };
}

export function service(overrides: Partial<ServiceModel> = {}): ServiceModel {
  return {
    name: 'ranker',
    cluster: 'default',
    health: 'HEALTHY',
    reason: '2 of 2 replicas ready',
    wanted: 2,
    ready: 2,
    replicas: [replica(), replica({ replica: 'ranker/1', worker: '1' })],
    ...overrides
  };
}
