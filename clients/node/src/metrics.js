// The metrics a service's process emits through this client, as CloudWatch EMF lines: plain
// JSON built here and handed to the `emit` the caller chose. A guest in the caller's process:
// no metrics library, no shared metric set or default dimensions, no global touched
// (docs/metrics.md, "Metrics from a service's process"). MeteredQuotaClassifier is the
// classifier's verdict on every 405 a guarded write met (the enforcement-is-back pager);
// QuotaRetryOutcome one per recovery cycle; QuotaRollbackFailed one per rollback that threw.
export const METRIC_NAMESPACE = 'SerenityAllocator';

function label(name, value) {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new TypeError(`EmfQuotaRetryRecorder: ${name} must be a non-blank string`);
  }
  return value;
}

/**
 * One EMF line per 405 verdict, per recovery cycle and per failed rollback. Built once per
 * process, where the producer is built: the deployment's environment (the stack's
 * EnvironmentName, dev or prod: the alarms match only that value) and the service's name.
 * Dimensions: Environment and the metric's own; `service` is a property, never a dimension, so
 * one alarm matches every service.
 */
export class EmfQuotaRetryRecorder {
  /**
   * @param {string} environment The deployment's environment (a dimension).
   * @param {{service: string, emit?: (line: string) => void, clockMs?: () => number}} options
   */
  constructor(environment, { service, emit = (line) => process.stdout.write(`${line}\n`), clockMs = Date.now } = {}) {
    Object.assign(this, {
      environment: label('environment', environment), service: label('service', service), emit, clockMs,
    });
  }

  /** One MeteredQuotaClassifier: a write was answered 405; `matched`: the quota's disguise. */
  quotaVerdict(matched) {
    this.line('MeteredQuotaClassifier', 1, { Matched: matched ? 'true' : 'false' });
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
