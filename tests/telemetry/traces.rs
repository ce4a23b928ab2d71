//! Trace context through job headers: our spans, captured with the OpenTelemetry SDK's
//! in-memory exporter, and the real Python PgQueuer 1.6.0's (`OpenTelemetryTracing`
//! over its own in-memory exporter), continuing each other's traces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer};
use opentelemetry::{Context, Value as OtelValue, global};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider, SpanData,
};
use pgqueuer::{JobId, NewJob, Pool, Queue, Worker};
use serde_json::{Value, json};

use crate::harness::TestDb;
use crate::python;

/// The process's tracer provider, exporting every span to memory. Tests run in
/// parallel, so each looks only at the spans of its own trace.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporterBuilder::new().build();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        global::set_tracer_provider(provider);
        exporter
    })
}

/// The finished spans of one trace.
fn spans_of(trace: TraceId) -> Vec<SpanData> {
    exporter()
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<OtelValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn text(s: &str) -> Option<OtelValue> {
    Some(OtelValue::from(s.to_owned()))
}

/// Runs `f` inside a fresh root span (a web request, say); returns its trace and span.
fn in_request<T>(f: impl FnOnce() -> T) -> (T, TraceId, SpanId) {
    exporter();
    let tracer = global::tracer("interop-test");
    let cx = Context::current_with_span(tracer.start("request"));
    let (trace, span) = {
        let sc = cx.span().span_context().clone();
        (sc.trace_id(), sc.span_id())
    };
    let out = {
        let _attached = cx.clone().attach();
        f()
    };
    cx.span().end();
    (out, trace, span)
}

/// The `otel` header of each job, by id.
fn carriers(db: &TestDb, ids: &[JobId]) -> HashMap<JobId, Value> {
    let mut client = db.client();
    client
        .query(
            "SELECT id, headers::text FROM pgqueuer WHERE id = ANY($1)",
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let headers: Value = serde_json::from_str(r.get::<_, &str>(1)).unwrap();
            (r.get(0), headers)
        })
        .collect()
}

/// The span id a W3C `traceparent` names, checking its trace id.
fn parent_in(headers: &Value, trace: TraceId) -> SpanId {
    let traceparent = headers["otel"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent in {headers}"));
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], trace.to_string(), "trace id of {traceparent}");
    assert_eq!(parts[3], "01", "sampled flag of {traceparent}");
    SpanId::from_hex(parts[2]).unwrap()
}

/// What the handler saw as its current span, per job.
type Seen = Arc<Mutex<HashMap<JobId, SpanId>>>;

/// Drains `entrypoint`'s jobs with a worker whose handler records its current span and
/// fails for the payload `fail`.
fn work(pool: &Pool, entrypoint: &str) -> Seen {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    Worker::builder(pool.clone())
        .threads(2)
        .entrypoint(entrypoint, move |job, _ctx| {
            let current = Context::current().span().span_context().span_id();
            record.lock().unwrap().insert(job.id, current);
            if job.payload_str() == Some("fail") {
                return Err("std::num::ParseIntError".parse::<u8>().unwrap_err().into());
            }
            Ok(())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    seen
}

fn assert_messaging(span: &SpanData, operation: &str, entrypoint: Option<&str>) {
    assert_eq!(
        attribute(span, "messaging.system"),
        text("pgqueuer"),
        "{}",
        span.name
    );
    assert_eq!(attribute(span, "messaging.operation.name"), text(operation));
    assert_eq!(attribute(span, "messaging.operation.type"), text(operation));
    assert_eq!(
        attribute(span, "messaging.destination.name"),
        entrypoint.and_then(text),
        "{}",
        span.name
    );
}

/// One `enqueue` is one producer `send` span, a child of the caller's span, whose
/// context is the job's `headers.otel` (beside the job's own headers); the worker runs
/// the handler inside a consumer `process` span, its child, current in the handler, with
/// PgQueuer's attributes and an OK status.
#[test]
fn a_single_enqueue_is_continued_by_the_process_span() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let (id, trace, request) = in_request(|| {
        queue
            .enqueue(NewJob::new("traced", "hello").header("tenant", "acme"))
            .unwrap()
    });
    let headers = &carriers(&db, &[id])[&id];
    assert_eq!(
        headers["tenant"], "acme",
        "the job's own headers stay: {headers}"
    );
    let carried = parent_in(headers, trace);
    let seen = work(&pool, "traced");

    let spans = spans_of(trace);
    let send = named(&spans, "send traced");
    assert_eq!(send.len(), 1, "{spans:#?}");
    let send = send[0];
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(send.parent_span_id, request);
    assert_eq!(
        send.span_context.span_id(),
        carried,
        "the carrier is the send span's"
    );
    assert_messaging(send, "send", Some("traced"));
    let process = named(&spans, "process traced");
    assert_eq!(process.len(), 1, "{spans:#?}");
    let process = process[0];
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(process.parent_span_id, carried);
    assert!(
        process.parent_span_is_remote,
        "the parent came from the headers"
    );
    assert_eq!(process.status, Status::Ok);
    assert_messaging(process, "process", Some("traced"));
    assert_eq!(
        attribute(process, "messaging.message.id"),
        text(&id.to_string())
    );
    assert_eq!(
        attribute(process, "messaging.message.body.size"),
        Some(OtelValue::I64(5))
    );
    assert_eq!(
        seen.lock().unwrap()[&id],
        process.span_context.span_id(),
        "the handler runs with the process span current"
    );
}

/// A batch is a client `send` span with one producer `create` span per job, and each
/// job carries its own create span's context; each process span is the child of its
/// job's create span.
#[test]
fn a_batch_has_one_create_span_and_carrier_per_job() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| NewJob::new("batched", format!("job {i}")))
        .collect();
    let (ids, trace, request) = in_request(|| queue.enqueue_many(&jobs).unwrap());
    let headers = carriers(&db, &ids);
    let carried: Vec<SpanId> = ids
        .iter()
        .map(|id| parent_in(&headers[id], trace))
        .collect();
    work(&pool, "batched");

    let spans = spans_of(trace);
    let send = named(&spans, "send");
    assert_eq!(send.len(), 1, "{spans:#?}");
    let send = send[0];
    assert_eq!(send.span_kind, SpanKind::Client);
    assert_eq!(send.parent_span_id, request);
    assert_messaging(send, "send", None);
    assert_eq!(
        attribute(send, "messaging.batch.message_count"),
        Some(OtelValue::I64(3))
    );
    let creates = named(&spans, "create batched");
    assert_eq!(creates.len(), 3, "{spans:#?}");
    let mut create_ids: Vec<SpanId> = creates.iter().map(|s| s.span_context.span_id()).collect();
    for create in &creates {
        assert_eq!(create.span_kind, SpanKind::Producer);
        assert_eq!(create.parent_span_id, send.span_context.span_id());
        assert_messaging(create, "create", Some("batched"));
    }
    let mut distinct = carried.clone();
    distinct.sort_by_key(ToString::to_string);
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "one distinct carrier per job: {carried:?}"
    );
    create_ids.sort_by_key(ToString::to_string);
    assert_eq!(create_ids, distinct, "each carrier is a create span's");
    let processes = named(&spans, "process batched");
    assert_eq!(processes.len(), 3);
    for (id, parent) in ids.iter().zip(&carried) {
        let process = processes
            .iter()
            .find(|p| attribute(p, "messaging.message.id") == text(&id.to_string()))
            .unwrap();
        assert_eq!(process.parent_span_id, *parent, "job {id}");
    }
}

/// A failing handler ends its process span in error, with the error's type.
#[test]
fn a_failed_job_ends_its_span_in_error() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let (_, trace, _) = in_request(|| queue.enqueue(NewJob::new("failing", "fail")).unwrap());
    work(&pool, "failing");
    let spans = spans_of(trace);
    let process = named(&spans, "process failing");
    assert_eq!(process.len(), 1, "{spans:#?}");
    assert!(
        matches!(&process[0].status, Status::Error { description } if description.contains("invalid digit")),
        "{:?}",
        process[0].status
    );
    assert_eq!(attribute(process[0], "error.type"), text("ParseIntError"));
}

/// With the SDK's W3C propagator installed globally, the carrier is written and read
/// through it, to the same effect.
#[test]
fn the_global_propagator_is_used_when_set() {
    global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let (id, trace, _) = in_request(|| queue.enqueue(NewJob::new("propagated", "x")).unwrap());
    let carried = parent_in(&carriers(&db, &[id])[&id], trace);
    work(&pool, "propagated");
    let spans = spans_of(trace);
    let process = named(&spans, "process propagated");
    assert_eq!(process.len(), 1, "{spans:#?}");
    assert_eq!(process[0].parent_span_id, carried);
}

/// A span the Python script reported.
fn python_spans(answer: &Value) -> Vec<Value> {
    answer["spans"].as_array().unwrap().clone()
}

fn python_span<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// Python to Rust: jobs enqueued by PgQueuer 1.6.0 with `OpenTelemetryTracing` (one,
/// then a batch) run in our worker; each of our process spans is in the Python trace,
/// the child of the Python `send` (or `create`) span whose context the job carries,
/// which the handler can also read raw through `Job::trace_carrier`.
#[test]
fn python_enqueues_and_our_process_span_continues_its_trace() {
    exporter();
    let db = TestDb::new();
    let pool = db.pool(4);
    for count in [1, 2] {
        let answer = python::script(
            &db,
            "tracing.py",
            &json!({"mode": "enqueue", "entrypoint": "from_python", "count": count}),
        );
        let spans = python_spans(&answer);
        let parents: Vec<&Value> = if count == 1 {
            python_span(&spans, "send from_python")
        } else {
            python_span(&spans, "create from_python")
        };
        assert_eq!(parents.len(), count, "{spans:#?}");
        let trace = TraceId::from_hex(parents[0]["trace_id"].as_str().unwrap()).unwrap();
        let carriers_seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let record = carriers_seen.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .entrypoint("from_python", move |job, _ctx| {
                let carrier = job.trace_carrier().cloned().map(Value::Object);
                record.lock().unwrap().push(carrier.unwrap_or(Value::Null));
                Ok(())
            })
            .build()
            .unwrap()
            .run_until_empty()
            .unwrap();
        let ours = spans_of(trace);
        let processes = named(&ours, "process from_python");
        assert_eq!(
            processes.len(),
            count,
            "our spans in the Python trace: {ours:#?}"
        );
        let mut expected: Vec<String> = parents
            .iter()
            .map(|p| p["span_id"].as_str().unwrap().to_owned())
            .collect();
        let mut got: Vec<String> = processes
            .iter()
            .map(|p| p.parent_span_id.to_string())
            .collect();
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "each process span's parent is a Python span");
        for p in processes {
            assert_eq!(p.span_kind, SpanKind::Consumer);
            assert_eq!(p.status, Status::Ok);
        }
        let raw = carriers_seen.lock().unwrap();
        assert_eq!(raw.len(), count);
        for carrier in raw.iter() {
            let traceparent = carrier["traceparent"]
                .as_str()
                .unwrap_or_else(|| panic!("{carrier}"));
            assert!(traceparent.contains(&trace.to_string()), "{traceparent}");
        }
    }
}

/// Rust to Python: jobs we enqueue inside a span (one, then a batch) run in a Python
/// PgQueuer worker with `OpenTelemetryTracing`; its process spans carry our trace id
/// and have our send (or create) spans as parents.
#[test]
fn we_enqueue_and_the_python_process_span_continues_our_trace() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let ((), trace, _) = in_request(|| {
        queue.enqueue(NewJob::new("to_python", "one")).unwrap();
        queue
            .enqueue_many(&[
                NewJob::new("to_python", "two"),
                NewJob::new("to_python", "three"),
            ])
            .unwrap();
    });
    let ours = spans_of(trace);
    let mut parents: Vec<String> = named(&ours, "send to_python")
        .into_iter()
        .chain(named(&ours, "create to_python"))
        .map(|s| s.span_context.span_id().to_string())
        .collect();
    assert_eq!(parents.len(), 3, "{ours:#?}");
    let answer = python::script(
        &db,
        "tracing.py",
        &json!({"mode": "work", "entrypoint": "to_python"}),
    );
    let spans = python_spans(&answer);
    let processes = python_span(&spans, "process to_python");
    assert_eq!(processes.len(), 3, "{spans:#?}");
    let mut got: Vec<String> = Vec::new();
    for p in &processes {
        assert_eq!(p["trace_id"], trace.to_string(), "{p}");
        assert_eq!(p["kind"], "CONSUMER");
        got.push(p["parent_span_id"].as_str().unwrap().to_owned());
    }
    got.sort();
    parents.sort();
    assert_eq!(
        got, parents,
        "each Python process span's parent is one of ours"
    );
}
