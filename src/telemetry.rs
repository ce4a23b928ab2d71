//! OpenTelemetry trace context through job headers, as PgQueuer's `OpenTelemetryTracing`
//! carries it, so that a job's trace continues from whatever enqueued it, in Rust or in
//! Python (feature `opentelemetry`, on the `opentelemetry` API crate alone: no exporter,
//! no runtime).
//!
//! On enqueue the current context is injected into `headers.otel`: one `send <entrypoint>`
//! producer span per single enqueue, whose context is the job's; for a batch, one `send`
//! client span with a `create <entrypoint>` producer span per job, each job carrying its
//! own. Around a handler whose job carries a context, a `process <entrypoint>` consumer
//! span runs as its child, with the attributes PgQueuer sets, its status from the
//! outcome. The carrier is written with the global text-map propagator when one is set
//! (`global::set_text_map_propagator`), and in W3C Trace Context form (`traceparent`,
//! `tracestate`) otherwise, which is what PgQueuer's default propagator reads.
//!
//! An empty carrier (no valid span context) is not written. Without the feature these
//! are no-ops; [`crate::Job::trace_carrier`] still gives a handler the raw carrier.

use serde_json::{Map, Value};

/// The trace carriers of one enqueue call, one per job, and the spans that end when the
/// insert has run. Empty without the feature.
pub(crate) struct Publish {
    #[cfg(feature = "opentelemetry")]
    carriers: Vec<Option<Map<String, Value>>>,
    #[cfg(feature = "opentelemetry")]
    spans: Vec<opentelemetry::Context>,
}

impl Publish {
    /// The carrier to put in job `i`'s headers under `otel`.
    pub(crate) fn carrier(&self, i: usize) -> Option<&Map<String, Value>> {
        #[cfg(feature = "opentelemetry")]
        {
            self.carriers.get(i).and_then(Option::as_ref)
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            let _ = i;
            None
        }
    }

    /// Whether any job gets a carrier.
    pub(crate) fn is_empty(&self) -> bool {
        #[cfg(feature = "opentelemetry")]
        {
            self.carriers.iter().all(Option::is_none)
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            true
        }
    }

    /// Ends the spans, with an error status when the enqueue failed.
    pub(crate) fn finish<T>(self, result: &crate::Result<T>) {
        #[cfg(feature = "opentelemetry")]
        otel::finish(&self.spans, result.as_ref().err());
        #[cfg(not(feature = "opentelemetry"))]
        let _ = result;
    }
}

/// Starts the spans of an enqueue of jobs of `entrypoints` (in input order) and makes
/// their carriers.
pub(crate) fn publish(entrypoints: &[&str]) -> Publish {
    #[cfg(feature = "opentelemetry")]
    {
        otel::publish(entrypoints)
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        let _ = entrypoints;
        Publish {}
    }
}

/// The span around one handler run (when its job carries a trace context).
pub(crate) struct Process {
    #[cfg(feature = "opentelemetry")]
    cx: Option<opentelemetry::Context>,
}

impl Process {
    /// Runs `f` (the handler) with the span's context current.
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(feature = "opentelemetry")]
        if let Some(cx) = &self.cx {
            let _attached = cx.clone().attach();
            return f();
        }
        f()
    }

    /// Ends the span: OK, or an error of `error_type` with `message`.
    pub(crate) fn finish(self, failure: Option<(&str, &str)>) {
        #[cfg(feature = "opentelemetry")]
        if let Some(cx) = self.cx {
            otel::finish_process(&cx, failure);
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = failure;
    }
}

/// Starts the `process` span of `job` if its headers carry a trace context.
pub(crate) fn process(job: &crate::Job) -> Process {
    #[cfg(feature = "opentelemetry")]
    {
        Process {
            cx: otel::process(job),
        }
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        let _ = job;
        Process {}
    }
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use std::collections::HashMap;

    use opentelemetry::trace::{
        SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
        Tracer,
    };
    use opentelemetry::{Context, KeyValue, global};
    use serde_json::{Map, Value};

    use super::Publish;

    /// The instrumentation scope, as PgQueuer names it.
    const SCOPE: &str = "pgqueuer";

    fn tracer() -> global::BoxedTracer {
        global::tracer(SCOPE)
    }

    fn messaging(operation: &'static str) -> Vec<KeyValue> {
        vec![
            KeyValue::new("messaging.system", "pgqueuer"),
            KeyValue::new("messaging.operation.name", operation),
            KeyValue::new("messaging.operation.type", operation),
        ]
    }

    /// Starts a span of `kind` named `name` under `parent`; its attributes are set only
    /// when it records (as PgQueuer sets them after the start), so that with no tracer
    /// provider an enqueue allocates next to nothing.
    fn start(
        tracer: &global::BoxedTracer,
        parent: &Context,
        name: String,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Context {
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .start_with_context(tracer, parent);
        let cx = parent.with_span(span);
        let span = cx.span();
        if span.is_recording() {
            span.set_attributes(attributes());
        }
        cx
    }

    /// The attributes of an operation on `entrypoint` (none for a batch's `send`).
    fn on(operation: &'static str, entrypoint: Option<&str>) -> Vec<KeyValue> {
        let mut attributes = messaging(operation);
        if let Some(entrypoint) = entrypoint {
            attributes.push(KeyValue::new(
                "messaging.destination.name",
                entrypoint.to_owned(),
            ));
        }
        attributes
    }

    pub(super) fn publish(entrypoints: &[&str]) -> Publish {
        let tracer = tracer();
        let parent = Context::current();
        if let [entrypoint] = entrypoints {
            let cx = start(
                &tracer,
                &parent,
                format!("send {entrypoint}"),
                SpanKind::Producer,
                || on("send", Some(entrypoint)),
            );
            return Publish {
                carriers: vec![inject(&cx)],
                spans: vec![cx],
            };
        }
        let batch = start(&tracer, &parent, "send".into(), SpanKind::Client, || {
            let mut attributes = on("send", None);
            attributes.push(KeyValue::new(
                "messaging.batch.message_count",
                i64::try_from(entrypoints.len()).unwrap_or(i64::MAX),
            ));
            attributes
        });
        let carriers = if batch.span().is_recording() || batch.span().span_context().is_valid() {
            entrypoints
                .iter()
                .map(|entrypoint| {
                    let cx = start(
                        &tracer,
                        &batch,
                        format!("create {entrypoint}"),
                        SpanKind::Producer,
                        || on("create", Some(entrypoint)),
                    );
                    let carrier = inject(&cx);
                    // A create span is over once its context is in the headers.
                    cx.span().end();
                    carrier
                })
                .collect()
        } else {
            // No tracer and no trace to continue: nothing to carry.
            vec![None; entrypoints.len()]
        };
        Publish {
            carriers,
            spans: vec![batch],
        }
    }

    pub(super) fn finish(spans: &[Context], error: Option<&crate::Error>) {
        for cx in spans {
            let span = cx.span();
            match error {
                Some(e) => span.set_status(Status::error(e.to_string())),
                None => span.set_status(Status::Ok),
            }
            span.end();
        }
    }

    /// The job's context as a `headers.otel` object (`None` when there is no valid one).
    fn inject(cx: &Context) -> Option<Map<String, Value>> {
        let mut carrier: HashMap<String, String> = HashMap::new();
        let global_fields = global::get_text_map_propagator(|p| p.fields().count());
        if global_fields > 0 {
            global::get_text_map_propagator(|p| p.inject_context(cx, &mut carrier));
        } else {
            let span = cx.span();
            let sc = span.span_context();
            if sc.is_valid() {
                carrier.insert(
                    "traceparent".into(),
                    format!(
                        "00-{}-{}-{:02x}",
                        sc.trace_id(),
                        sc.span_id(),
                        sc.trace_flags().to_u8()
                    ),
                );
                let state = sc.trace_state().header();
                if !state.is_empty() {
                    carrier.insert("tracestate".into(), state);
                }
            }
        }
        (!carrier.is_empty()).then(|| {
            carrier
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect()
        })
    }

    /// The parent context in a job's `headers.otel`, if any.
    fn extract(job: &crate::Job) -> Option<Context> {
        let carrier = job.trace_carrier()?;
        let map: HashMap<String, String> = carrier
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.to_ascii_lowercase(), v.to_owned())))
            .collect();
        if map.is_empty() {
            return None;
        }
        let global_fields = global::get_text_map_propagator(|p| p.fields().count());
        if global_fields > 0 {
            let cx = global::get_text_map_propagator(|p| p.extract(&map));
            return cx.span().span_context().is_valid().then_some(cx);
        }
        let sc = parse_traceparent(map.get("traceparent")?, map.get("tracestate"))?;
        Some(Context::new().with_remote_span_context(sc))
    }

    /// A W3C `traceparent` (version 00): `00-<trace id>-<span id>-<flags>`.
    fn parse_traceparent(header: &str, state: Option<&String>) -> Option<SpanContext> {
        let parts: Vec<&str> = header.trim().split('-').collect();
        let [version, trace, span, flags] = parts[..] else {
            return None;
        };
        if version.len() != 2 || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        let state = state
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let sc = SpanContext::new(trace_id, span_id, TraceFlags::new(flags), true, state);
        sc.is_valid().then_some(sc)
    }

    pub(super) fn process(job: &crate::Job) -> Option<Context> {
        let parent = extract(job)?;
        Some(start(
            &tracer(),
            &parent,
            format!("process {}", job.entrypoint),
            SpanKind::Consumer,
            || {
                let mut attributes = on("process", Some(&job.entrypoint));
                attributes.extend([
                    KeyValue::new("messaging.message.id", job.id.to_string()),
                    KeyValue::new(
                        "messaging.message.body.size",
                        i64::try_from(job.payload.as_ref().map_or(0, Vec::len)).unwrap_or(i64::MAX),
                    ),
                ]);
                attributes
            },
        ))
    }

    pub(super) fn finish_process(cx: &Context, failure: Option<(&str, &str)>) {
        let span = cx.span();
        match failure {
            None => span.set_status(Status::Ok),
            Some((error_type, message)) => {
                span.set_status(Status::error(message.to_owned()));
                span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
            }
        }
        span.end();
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn traceparents_parse_and_bad_ones_are_refused() {
            let sc = parse_traceparent(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                Some(&"congo=t61rcWkgMzE".to_owned()),
            )
            .unwrap();
            assert_eq!(
                sc.trace_id().to_string(),
                "0af7651916cd43dd8448eb211c80319c"
            );
            assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
            assert!(sc.is_sampled() && sc.is_remote());
            assert_eq!(sc.trace_state().header(), "congo=t61rcWkgMzE");
            for bad in [
                "",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                "00-0af7651916cd43dd8448eb211c80319c-zzzzzzzzzzzzzzzz-01",
            ] {
                assert!(parse_traceparent(bad, None).is_none(), "{bad:?}");
            }
        }
    }
}
