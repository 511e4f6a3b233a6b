// QuotaRetryOutcome and QuotaRollbackFailed as CloudWatch EMF lines (plain JSON on stdout).
export const METRIC_NAMESPACE = 'SerenityAllocator';

/** One EMF line per recovery cycle and per failed rollback. */
export class EmfQuotaRetryRecorder {
  /**
   * @param {string} environment The service's environment name (a dimension).
   * @param {{service?: string, emit?: (line: string) => void, clockMs?: () => number}} [options]
   */
  constructor(environment, { service = 'unknown', emit = (line) => process.stdout.write(`${line}\n`), clockMs = Date.now } = {}) {
    Object.assign(this, { environment, service, emit, clockMs });
  }

  /** `outcome`: recovered | exhausted | abandoned; `attempt`: the attempt number. */
  record(outcome, attempt, site) {
    this.line('QuotaRetryOutcome', attempt, { Outcome: outcome, Site: site });
  }

  rollbackFailed(site) {
    this.line('QuotaRollbackFailed', 1, { Site: site });
  }

  line(name, value, dimensions) {
    const blob = {
      _aws: {
        Timestamp: Math.trunc(this.clockMs()),
        CloudWatchMetrics: [{
          Namespace: METRIC_NAMESPACE,
          Dimensions: [['Environment', ...Object.keys(dimensions)]],
          Metrics: [{ Name: name, Unit: 'Count' }],
        }],
      },
      Environment: this.environment,
      ...dimensions,
      service: this.service,
      [name]: value,
    };
    try {
      this.emit(JSON.stringify(blob));
    } catch {
      // Metrics never change the write's outcome.
    }
  }
}
