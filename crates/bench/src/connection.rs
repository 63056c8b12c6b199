//! One connection's life: preload its slice of the keys, then run the
//! measured phase, as one tokio task.
//!
//! The measured phase is two futures joined in the connection's task: a
//! writer that encodes requests and writes them in batches, and a reader that
//! parses replies and records them. A semaphore with `pipeline` permits
//! bounds the requests in flight: the writer takes a permit per request and
//! the reader returns it when the reply arrives. The writer hands the reader
//! each request's kind and due time through a channel *before* writing its
//! bytes, so a reply never arrives ahead of its record.
//!
//! With one request in flight and no rate, the common case, the writer and
//! the reader are one loop instead (`measure_one_at_a_time`): write a
//! request, read its reply, repeat, with no permit or channel message per
//! request.
//!
//! Closed loop (no rate): a request is due when the writer gets room for it.
//! Open loop: request `n` of connection `c` is due at
//! `start + (c + n * connections) / rate`, whatever the server is doing, and
//! latency is measured from that instant; a stalled server makes the
//! requests behind it late, and their lateness is recorded (coordinated
//! omission correction, as in wrk2).
//!
//! Every wait is bounded: the writer stops at the plan's stop time or when
//! its request budget is spent, each read waits at most `timeout` (in
//! `measure_one_at_a_time`, each reply must come within `timeout` of its
//! request) and never past `stop + timeout`, and a write that the socket
//! does not take at once waits at most `timeout`. A connection that fails
//! (I/O error, timeout, malformed or out-of-step reply) stops sending (the
//! pipelined phase's reader closes the semaphore, which stops its writer)
//! and reports why; its requests in flight are not counted.

use crate::limits::{PRELOAD_PIPELINE, REPLY_BYTES_MAX};
use crate::reply::{parse_binary, parse_memcached, parse_resp, Parsed, Reply, ReplyError};
use crate::request::{Op, Protocol};
use crate::socket::{ReadHalf, Stream, WriteHalf};
use crate::stats::Tally;
use crate::workload::{Shared, Workload};
use bytes::{Buf, BytesMut};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Sleep;

/// When the measured phase runs; the same for every connection.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// When the first requests are due (warm-up starts).
    pub start: Instant,
    /// Requests due at or after this are measured.
    pub measure_start: Instant,
    /// No request due at or after this is sent.
    pub stop: Instant,
    pub pipeline: usize,
    pub timeout: Duration,
    /// Open-loop rate over all connections, requests per second.
    pub rate: Option<u64>,
}

/// The read half of a connection, its buffer of unparsed bytes, and the
/// timer that bounds its reads.
pub struct Reader {
    half: ReadHalf,
    buffer: BytesMut,
    /// Armed for the earliest deadline a read has waited for since it last
    /// fired (see [`Reader::read_more`]); made at the first read.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Reader {
    /// Reads at least one more byte, waiting until `deadline` at most
    /// (`timeout` is only for the message).
    ///
    /// A connection's deadlines only move later, so one timer serves all
    /// its reads: it stays armed for an earlier read's deadline and, when
    /// that passes while a later read waits, is armed again for the later
    /// one. A timer registered and dropped for every read would cost a
    /// clock reading and two visits to the runtime's timer wheel per reply.
    async fn read_more(&mut self, deadline: Instant, timeout: Duration) -> Result<(), String> {
        if self.buffer.len() >= REPLY_BYTES_MAX {
            // The parsers refuse longer replies first; this is a backstop.
            return Err(format!("reply longer than {REPLY_BYTES_MAX} bytes"));
        }
        self.buffer.reserve(16 * 1024);
        let deadline = tokio::time::Instant::from_std(deadline);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        // No caller passes a deadline earlier than the one before; were one
        // to, the timer would oversleep it, so it is moved back.
        if timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
        let read = self.half.read_buf(&mut self.buffer);
        tokio::pin!(read);
        loop {
            tokio::select! {
                biased;
                result = &mut read => {
                    return match result {
                        Err(error) => Err(format!("read failed: {error}")),
                        Ok(0) => Err("the server closed the connection".to_owned()),
                        Ok(_) => Ok(()),
                    };
                }
                () = timer.as_mut() => {
                    if timer.deadline() >= deadline {
                        return Err(format!("no reply within {timeout:?}"));
                    }
                    timer.as_mut().reset(deadline);
                }
            }
        }
    }

    /// Parses the reply at the front of the buffer and consumes it.
    fn take_reply(&mut self, protocol: Protocol) -> Result<Option<Reply>, String> {
        match parse_reply(protocol, &self.buffer).map_err(|error| error.to_string())? {
            Parsed::Incomplete => Ok(None),
            Parsed::Complete { reply, frame_bytes } => {
                self.buffer.advance(frame_bytes);
                Ok(Some(reply))
            }
        }
    }
}

/// An open connection, numbered `index` in `0..connections`.
pub struct Connection {
    pub index: usize,
    reader: Reader,
    writer: WriteHalf,
}

impl Connection {
    pub fn new(index: usize, stream: Stream) -> Self {
        let (half, writer) = stream.into_split();
        Connection {
            index,
            reader: Reader {
                half,
                buffer: BytesMut::with_capacity(16 * 1024),
                timer: None,
            },
            writer,
        }
    }
}

/// What the preload of one connection's slice did.
#[derive(Debug, Default)]
pub struct PreloadOutcome {
    pub stored: u64,
    pub failures: u64,
    pub first_failure: Option<String>,
}

/// What one connection measured.
#[derive(Debug, Default)]
pub struct MeasureOutcome {
    pub tally: Tally,
    /// When the last measured reply arrived.
    pub last_reply: Option<Instant>,
    /// Why the connection was dropped early, if it was.
    pub failure: Option<String>,
}

/// A request written and not yet answered.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    op: Op,
    due: Instant,
}

fn parse_reply(protocol: Protocol, buffer: &[u8]) -> Result<Parsed, ReplyError> {
    match protocol {
        Protocol::Memcached => parse_memcached(buffer),
        Protocol::Binary => parse_binary(buffer),
        Protocol::Redis => parse_resp(buffer),
    }
}

async fn write_all(writer: &mut WriteHalf, bytes: &[u8], timeout: Duration) -> Result<(), String> {
    // Most requests fit in the socket's buffer at once; only the rest of
    // one that does not waits, under a timer.
    let written = match writer.try_write(bytes) {
        Ok(written) => written,
        Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => 0,
        Err(error) => return Err(format!("write failed: {error}")),
    };
    let rest = bytes.get(written..).unwrap_or_default();
    if rest.is_empty() {
        return Ok(());
    }
    match tokio::time::timeout(timeout, writer.write_all(rest)).await {
        Err(_) => Err(format!("write blocked for {timeout:?}")),
        Ok(Err(error)) => Err(format!("write failed: {error}")),
        Ok(Ok(())) => Ok(()),
    }
}

/// Writes every key of this connection's preload slice once, in batches of
/// [`PRELOAD_PIPELINE`] sets, and checks each reply is a success. After an
/// I/O failure the keys not yet acknowledged count as failures too.
pub async fn preload(
    connection: &mut Connection,
    shared: &Shared,
    timeout: Duration,
) -> PreloadOutcome {
    let mut outcome = PreloadOutcome::default();
    let range = shared.preload_range(connection.index);
    let mut workload = Workload::new(shared, connection.index);
    let mut out = Vec::new();
    let mut next = range.start;
    while next < range.end {
        let batch_end = range.end.min(next + PRELOAD_PIPELINE as u64);
        for index in next..batch_end {
            workload.encode_set(shared, index, &mut out);
        }
        let mut answered = 0;
        let result = preload_batch(
            connection,
            shared,
            &out,
            batch_end - next,
            timeout,
            &mut answered,
            &mut outcome,
        )
        .await;
        out.clear();
        if let Err(reason) = result {
            outcome.failures += range.end - next - answered;
            outcome.first_failure.get_or_insert(reason);
            return outcome;
        }
        next = batch_end;
    }
    outcome
}

/// Writes one batch of `count` sets and tallies their replies, counting
/// them in `answered` so that a caller seeing an error knows how many keys
/// are still unaccounted for.
async fn preload_batch(
    connection: &mut Connection,
    shared: &Shared,
    requests: &[u8],
    count: u64,
    timeout: Duration,
    answered: &mut u64,
    outcome: &mut PreloadOutcome,
) -> Result<(), String> {
    write_all(&mut connection.writer, requests, timeout).await?;
    while *answered < count {
        let Some(reply) = connection.reader.take_reply(shared.protocol)? else {
            connection
                .reader
                .read_more(Instant::now() + timeout, timeout)
                .await?;
            continue;
        };
        *answered += 1;
        if reply == Reply::Stored {
            outcome.stored += 1;
        } else {
            outcome.failures += 1;
            outcome
                .first_failure
                .get_or_insert_with(|| format!("set answered with {reply:?}"));
        }
    }
    Ok(())
}

/// Runs the measured phase on `connection`; `budget` is how many measured
/// requests it may send (`None`: until the plan's stop time).
pub async fn measure(
    connection: Connection,
    shared: Arc<Shared>,
    plan: Plan,
    budget: Option<u64>,
) -> MeasureOutcome {
    let outcome = if plan.pipeline == 1 && plan.rate.is_none() {
        let mut outcome = MeasureOutcome::default();
        let result = measure_one_at_a_time(connection, &shared, &plan, budget, &mut outcome).await;
        if let Err(reason) = result {
            outcome.failure = Some(reason);
        }
        outcome
    } else {
        measure_pipelined(connection, &shared, &plan, budget).await
    };
    if outcome.failure.is_some() {
        shared
            .live
            .failed_connections
            .fetch_add(1, Ordering::Relaxed);
    }
    outcome
}

/// The measured phase with a writer and a reader (see the module's
/// documentation): any pipeline depth, closed or open loop.
async fn measure_pipelined(
    connection: Connection,
    shared: &Shared,
    plan: &Plan,
    budget: Option<u64>,
) -> MeasureOutcome {
    let Connection {
        index,
        mut reader,
        mut writer,
    } = connection;
    let permits = Semaphore::new(plan.pipeline);
    let (sender, receiver) = mpsc::channel(plan.pipeline);
    let mut writer_state = WriterState {
        workload: Workload::new(shared, index),
        sent: 0,
        measured_sent: 0,
        send_lag_ns_total: 0,
        send_lag_ns_max: 0,
        budget,
    };
    let writing = write_loop(
        &mut writer,
        sender,
        &permits,
        shared,
        plan,
        index,
        &mut writer_state,
    );
    let reading = read_loop(&mut reader, receiver, &permits, shared, plan);
    let (write_result, mut outcome) = tokio::join!(writing, reading);
    if let Err(reason) = write_result {
        outcome.failure.get_or_insert(reason);
    }
    outcome.tally.send_lag_ns_total = writer_state.send_lag_ns_total;
    outcome.tally.send_lag_ns_max = writer_state.send_lag_ns_max;
    outcome
}

/// The measured phase with one request in flight and no rate: each request
/// is written once the reply to the one before has arrived, so writing and
/// reading are one loop, without the permit and the channel message per
/// request that [`measure_pipelined`]'s writer and reader pass between
/// them. What is measured is the same: a request is due when it is sent.
async fn measure_one_at_a_time(
    connection: Connection,
    shared: &Shared,
    plan: &Plan,
    budget: Option<u64>,
    outcome: &mut MeasureOutcome,
) -> Result<(), String> {
    let Connection {
        index,
        mut reader,
        mut writer,
    } = connection;
    let mut workload = Workload::new(shared, index);
    let mut out = Vec::with_capacity(1024);
    let mut in_flight = VecDeque::with_capacity(1);
    let mut latencies = Vec::with_capacity(1);
    let mut measured_sent = 0;
    let hard_deadline = plan.stop + plan.timeout;
    tokio::time::sleep_until(plan.start.into()).await;
    loop {
        // Nothing is in flight here, so bytes already read (left from the
        // preload, or after the last reply) were never asked for.
        if !reader.buffer.is_empty() {
            return Err("the server sent a reply nobody asked for".to_owned());
        }
        let due = Instant::now();
        if due >= plan.stop || budget.is_some_and(|budget| measured_sent >= budget) {
            return Ok(());
        }
        out.clear();
        let op = workload.encode_next(shared, &mut out);
        write_all(&mut writer, &out, plan.timeout).await?;
        if due >= plan.measure_start {
            measured_sent += 1;
        }
        in_flight.push_back(InFlight { op, due });
        while take_replies(
            &mut reader,
            &mut in_flight,
            shared,
            plan,
            &mut latencies,
            outcome,
        )? == 0
        {
            reader
                .read_more((due + plan.timeout).min(hard_deadline), plan.timeout)
                .await?;
        }
        shared.recorder.record(&latencies);
        latencies.clear();
    }
}

struct WriterState {
    workload: Workload,
    /// Requests sent so far: the next request's number in the schedule.
    sent: u64,
    measured_sent: u64,
    send_lag_ns_total: u64,
    send_lag_ns_max: u64,
    budget: Option<u64>,
}

/// When request `number` of `connection` is due in an open-loop run: the
/// connections take turns, so the whole client sends one request every
/// `1 / rate` seconds.
fn due_time(plan: &Plan, rate: u64, connections: usize, connection: usize, number: u64) -> Instant {
    let slot = u128::from(number) * connections as u128 + connection as u128;
    let offset_ns = slot * 1_000_000_000 / u128::from(rate.max(1));
    plan.start + Duration::from_nanos(u64::try_from(offset_ns).unwrap_or(u64::MAX))
}

/// Sends requests until the stop time, the budget, or a failure. Owns
/// `sender`, so the reader learns that no more requests are coming when this
/// returns.
async fn write_loop(
    writer: &mut WriteHalf,
    sender: mpsc::Sender<InFlight>,
    permits: &Semaphore,
    shared: &Shared,
    plan: &Plan,
    index: usize,
    state: &mut WriterState,
) -> Result<(), String> {
    let mut out = Vec::with_capacity(16 * 1024);
    let due_of = |number| {
        plan.rate
            .map(|rate| due_time(plan, rate, shared.connections, index, number))
    };
    tokio::time::sleep_until(plan.start.into()).await;
    loop {
        if let Some(due) = due_of(state.sent) {
            if due >= plan.stop {
                return Ok(());
            }
            tokio::time::sleep_until(due.into()).await;
        }
        // Wait for room in the pipeline, but never past the stop time. An
        // error means the reader failed and closed the semaphore.
        let Ok(Ok(first)) = tokio::time::timeout_at(plan.stop.into(), permits.acquire()).await
        else {
            return Ok(());
        };
        first.forget();
        let finished = fill_batch(&sender, permits, shared, plan, state, &mut out, &due_of);
        if !out.is_empty() {
            write_all(writer, &out, plan.timeout).await?;
            out.clear();
        }
        if finished {
            return Ok(());
        }
    }
}

/// Encodes every request that is due (closed loop: as many as the pipeline
/// has room for), holding one permit already. Returns unused permits, and
/// whether the writer is done.
fn fill_batch(
    sender: &mpsc::Sender<InFlight>,
    permits: &Semaphore,
    shared: &Shared,
    plan: &Plan,
    state: &mut WriterState,
    out: &mut Vec<u8>,
    due_of: &dyn Fn(u64) -> Option<Instant>,
) -> bool {
    let now = Instant::now();
    let mut granted = 1;
    let mut batch = 0;
    let mut finished = false;
    loop {
        let due = due_of(state.sent).unwrap_or(now);
        if due > now {
            break;
        }
        if due >= plan.stop
            || state
                .budget
                .is_some_and(|budget| state.measured_sent >= budget)
        {
            finished = true;
            break;
        }
        if batch == granted {
            match permits.try_acquire() {
                Ok(permit) => permit.forget(),
                Err(_) => break,
            }
            granted += 1;
        }
        let rollback = out.len();
        let op = state.workload.encode_next(shared, out);
        // Fails only when the reader has gone (the connection failed).
        if sender.try_send(InFlight { op, due }).is_err() {
            out.truncate(rollback);
            finished = true;
            break;
        }
        batch += 1;
        state.sent += 1;
        if due >= plan.measure_start {
            state.measured_sent += 1;
            let lag_ns =
                u64::try_from(now.saturating_duration_since(due).as_nanos()).unwrap_or(u64::MAX);
            state.send_lag_ns_total = state.send_lag_ns_total.saturating_add(lag_ns);
            state.send_lag_ns_max = state.send_lag_ns_max.max(lag_ns);
        }
    }
    permits.add_permits(granted - batch);
    finished
}

/// Receives replies until the writer is done and every request is answered,
/// or the connection fails (then it closes `permits` to stop the writer).
async fn read_loop(
    reader: &mut Reader,
    mut receiver: mpsc::Receiver<InFlight>,
    permits: &Semaphore,
    shared: &Shared,
    plan: &Plan,
) -> MeasureOutcome {
    let mut outcome = MeasureOutcome::default();
    let result = read_replies(reader, &mut receiver, permits, shared, plan, &mut outcome).await;
    if let Err(reason) = result {
        permits.close();
        outcome.failure = Some(reason);
    }
    outcome
}

async fn read_replies(
    reader: &mut Reader,
    receiver: &mut mpsc::Receiver<InFlight>,
    permits: &Semaphore,
    shared: &Shared,
    plan: &Plan,
    outcome: &mut MeasureOutcome,
) -> Result<(), String> {
    let mut in_flight = VecDeque::with_capacity(plan.pipeline);
    let mut latencies = Vec::with_capacity(plan.pipeline);
    let hard_deadline = plan.stop + plan.timeout;
    loop {
        while let Ok(entry) = receiver.try_recv() {
            in_flight.push_back(entry);
        }
        if in_flight.is_empty() {
            // Requests are queued before their bytes are written, so bytes
            // with no request queued were never asked for.
            if !reader.buffer.is_empty() {
                return Err("the server sent a reply nobody asked for".to_owned());
            }
            match receiver.recv().await {
                Some(entry) => in_flight.push_back(entry),
                None => return Ok(()),
            }
        }
        let completed = take_replies(
            reader,
            &mut in_flight,
            shared,
            plan,
            &mut latencies,
            outcome,
        )?;
        if completed > 0 {
            permits.add_permits(completed);
            shared.recorder.record(&latencies);
            latencies.clear();
            continue;
        }
        let deadline = (Instant::now() + plan.timeout).min(hard_deadline);
        reader.read_more(deadline, plan.timeout).await?;
    }
}

/// What a reply means for the request it answers; `None` when it cannot be
/// an answer to it (the connection is out of step).
fn classify(op: Op, reply: Reply) -> Option<(bool, bool)> {
    // (hit, error)
    match (op, reply) {
        (Op::Get, Reply::Hit { .. }) => Some((true, false)),
        (Op::Get, Reply::Miss) | (Op::Set, Reply::Stored) => Some((false, false)),
        (Op::Set, Reply::NotStored) | (_, Reply::Error) => Some((false, true)),
        _ => None,
    }
}

/// Consumes every complete reply in the buffer, pairing each with the
/// oldest request in flight, and tallies the measured ones.
fn take_replies(
    reader: &mut Reader,
    in_flight: &mut VecDeque<InFlight>,
    shared: &Shared,
    plan: &Plan,
    latencies: &mut Vec<(Op, u64)>,
    outcome: &mut MeasureOutcome,
) -> Result<usize, String> {
    let mut completed = 0;
    let mut errors = 0;
    // Read once the first reply is whole, not on every call that finds none.
    let mut now = None;
    while let Some(&InFlight { op, due }) = in_flight.front() {
        let Some(reply) = reader.take_reply(shared.protocol)? else {
            break;
        };
        let now = *now.get_or_insert_with(Instant::now);
        in_flight.pop_front();
        completed += 1;
        let (hit, error) =
            classify(op, reply).ok_or_else(|| format!("{reply:?} is not an answer to a {op:?}"))?;
        errors += u64::from(error);
        if due < plan.measure_start {
            continue;
        }
        let tally = &mut outcome.tally;
        match op {
            Op::Get => tally.gets += 1,
            Op::Set => tally.sets += 1,
        }
        if op == Op::Get && !error {
            if hit {
                tally.hits += 1;
            } else {
                tally.misses += 1;
            }
        }
        tally.errors += u64::from(error);
        let latency_ns =
            u64::try_from(now.saturating_duration_since(due).as_nanos()).unwrap_or(u64::MAX);
        latencies.push((op, latency_ns));
        outcome.last_reply = Some(now);
    }
    shared.live.add(completed as u64, errors);
    Ok(completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_loop_connections_take_turns_at_the_rate() {
        let start = Instant::now();
        let plan = Plan {
            start,
            measure_start: start,
            stop: start + Duration::from_secs(10),
            pipeline: 1,
            timeout: Duration::from_secs(1),
            rate: Some(1000),
        };
        let due = |connection, number| due_time(&plan, 1000, 4, connection, number) - start;
        assert_eq!(due(0, 0), Duration::ZERO);
        assert_eq!(due(1, 0), Duration::from_millis(1));
        assert_eq!(due(3, 0), Duration::from_millis(3));
        assert_eq!(due(0, 1), Duration::from_millis(4));
        assert_eq!(due(2, 250), Duration::from_millis(1002));
    }

    #[test]
    fn replies_are_matched_to_what_was_asked() {
        assert_eq!(
            classify(Op::Get, Reply::Hit { value_bytes: 3 }),
            Some((true, false))
        );
        assert_eq!(classify(Op::Get, Reply::Miss), Some((false, false)));
        assert_eq!(classify(Op::Set, Reply::Stored), Some((false, false)));
        assert_eq!(classify(Op::Set, Reply::NotStored), Some((false, true)));
        assert_eq!(classify(Op::Get, Reply::Error), Some((false, true)));
        assert_eq!(classify(Op::Get, Reply::Stored), None);
        assert_eq!(classify(Op::Set, Reply::Miss), None);
    }
}
