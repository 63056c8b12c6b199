//! The binary protocol's commands, each a method of [`Session`], answered
//! as memcached 1.6 answers them (see [`larder_protocol::binary`]).
//!
//! They share the engine calls, the counters and the acknowledgements of
//! the text commands: a write's response waits for its commit, and turns
//! into a "Temporary failure" should the commit fail. A quiet command's
//! success sends nothing, and a quiet get's miss neither; its failure is
//! answered.

use crate::session::{Flow, Session};
use larder_engine::{
    Arith, ArithOutcome, DeleteOutcome, Error as EngineError, Expiry, ReadOptions, StoreMode,
    StoreOutcome,
};
use larder_protocol::binary::{
    self, write_error, write_response, Command, Header, Status, StoreKind,
};

impl Session {
    /// Handles one binary request, appending its response.
    pub(crate) fn handle_binary(&mut self, request: &binary::Request<'_>) -> Flow {
        let header = &request.header;
        self.binary_request = Some(*header);
        let flow = match request.command {
            Command::Get {
                key,
                touch,
                with_key,
                quiet,
            } => {
                self.binary_get(header, key, touch, with_key, quiet);
                Flow::Continue
            }
            Command::Store {
                kind,
                key,
                value,
                flags,
                exptime,
                quiet,
            } => {
                let mode = match kind {
                    // As in memcached, a CAS unique makes any of them a cas.
                    _ if header.cas != 0 => StoreMode::Cas(header.cas),
                    StoreKind::Set => StoreMode::Set,
                    StoreKind::Add => StoreMode::Add,
                    StoreKind::Replace => StoreMode::Replace,
                };
                let expiry = self.expiry(exptime);
                self.binary_store(header, mode, key, value, flags, expiry, quiet);
                Flow::Continue
            }
            Command::Concat {
                append,
                key,
                value,
                quiet,
            } => {
                let mode = match (append, header.cas) {
                    (true, 0) => StoreMode::Append,
                    (true, cas) => StoreMode::AppendIfCas(cas),
                    (false, 0) => StoreMode::Prepend,
                    (false, cas) => StoreMode::PrependIfCas(cas),
                };
                // Flags and expiry are the item's own.
                self.binary_store(header, mode, key, value, 0, Expiry::Never, quiet);
                Flow::Continue
            }
            Command::Delete { key, quiet } => {
                self.binary_delete(header, key, quiet);
                Flow::Continue
            }
            Command::Arithmetic {
                incr,
                key,
                delta,
                initial,
                exptime,
                quiet,
            } => {
                self.binary_arithmetic(header, incr, key, delta, initial, exptime, quiet);
                Flow::Continue
            }
            Command::Touch { key, exptime } => {
                self.binary_touch(header, key, exptime);
                Flow::Continue
            }
            Command::Flush { delay, quiet } => {
                self.binary_flush(header, delay, quiet);
                Flow::Continue
            }
            Command::Stat { group } => {
                self.binary_stat(header, group);
                Flow::Continue
            }
            Command::Noop => {
                write_response(&mut self.output, header, Status::Success, 0, &[], &[], &[]);
                Flow::Continue
            }
            Command::Version => {
                let version = crate::stats::VERSION.as_bytes();
                write_response(
                    &mut self.output,
                    header,
                    Status::Success,
                    0,
                    &[],
                    &[],
                    version,
                );
                Flow::Continue
            }
            Command::Quit { quiet } => {
                if !quiet {
                    write_response(&mut self.output, header, Status::Success, 0, &[], &[], &[]);
                }
                Flow::Close
            }
        };
        self.binary_request = None;
        flow
    }

    /// Answers an engine error: "Too large." for a value the engine cannot
    /// hold, "Temporary failure" for one a retry may get past, "Internal
    /// error" otherwise, each with the engine's message.
    fn binary_engine_error(&mut self, header: &Header, error: &EngineError) {
        self.counts.server_errors.add(1);
        let status = match error {
            EngineError::TooLarge(_) => Status::TooLarge,
            error if error.is_temporary() => Status::TemporaryFailure,
            _ => Status::InternalError,
        };
        let message = error.to_string();
        binary::write_error_message(&mut self.output, header, status, message.as_bytes());
    }

    /// Answers a write: success with the item's new CAS unique (nothing if
    /// quiet), or `failure`; either way an acknowledgement.
    fn binary_ack(&mut self, header: &Header, outcome: Result<u64, Status>, quiet: bool) {
        match outcome {
            Ok(_) if quiet => self.ack_quietly(),
            Ok(cas) => {
                self.ack(|out| write_response(out, header, Status::Success, cas, &[], &[], &[]))
            }
            Err(status) => self.ack(|out| write_error(out, header, status)),
        }
    }

    /// get, getq, getk, getkq, and with `touch`, gat, gatq, gatk, gatkq: a
    /// hit answers the flags as extras, the key if asked for, the value and
    /// the CAS unique.
    fn binary_get(
        &mut self,
        header: &Header,
        key: &[u8],
        touch: Option<u32>,
        with_key: bool,
        quiet: bool,
    ) {
        let options = ReadOptions {
            touch: touch.map(|exptime| self.expiry(exptime)),
            ..ReadOptions::default()
        };
        let key_echoed: &[u8] = if with_key { key } else { &[] };
        let start = self.output.len();
        let output = &mut self.output;
        let mut too_large = None;
        // As `get_one` does for the text protocol: straight into the reply
        // when it has room, else copied out and written after the lock.
        let found = self.shared.engine.get_visit(key, options, |item, value| {
            let room = output.capacity() - output.len();
            let flags = item.flags.to_be_bytes();
            let needed = binary::VALUE_RESPONSE_OVERHEAD_BYTES + key_echoed.len() + value.len();
            if needed <= room {
                write_response(
                    output,
                    header,
                    Status::Success,
                    item.cas,
                    &flags,
                    key_echoed,
                    value,
                );
            } else {
                too_large = Some((flags, item.cas, value.to_vec()));
            }
        });
        let counts = &self.counts;
        let (asked, hits, misses) = match touch {
            Some(_) => (&counts.cmd_touch, &counts.touch_hits, &counts.touch_misses),
            None => (&counts.cmd_get, &counts.get_hits, &counts.get_misses),
        };
        asked.add(1);
        let (hit, seen) = match found {
            Ok((found, seen)) => (found.is_some(), seen),
            Err(error) => return self.binary_engine_error(header, &error),
        };
        if hit { hits } else { misses }.add(1);
        if let Some((flags, cas, value)) = too_large {
            write_response(
                &mut self.output,
                header,
                Status::Success,
                cas,
                &flags,
                key_echoed,
                &value,
            );
        }
        if !hit && !quiet {
            if with_key {
                // memcached answers a getk's miss with the key, no message.
                write_response(
                    &mut self.output,
                    header,
                    Status::KeyNotFound,
                    0,
                    &[],
                    key,
                    &[],
                );
            } else {
                write_error(&mut self.output, header, Status::KeyNotFound);
            }
        }
        self.ack_seen(start, seen);
    }

    /// set, add, replace (a cas with a CAS unique), append, prepend and
    /// their quiet forms.
    #[allow(clippy::too_many_arguments)]
    fn binary_store(
        &mut self,
        header: &Header,
        mode: StoreMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expiry: Expiry,
        quiet: bool,
    ) {
        self.counts.cmd_set.add(1);
        let outcome = match self.engine().store(mode, key, value, flags, expiry) {
            Ok((outcome, ticket)) => {
                self.wrote(ticket);
                outcome
            }
            Err(error) => return self.binary_engine_error(header, &error),
        };
        self.count_store(outcome, mode);
        let answer = match (outcome, mode) {
            (StoreOutcome::Stored { cas }, _) => Ok(cas),
            (StoreOutcome::NotStored, StoreMode::Add) => Err(Status::KeyExists),
            (StoreOutcome::NotStored, StoreMode::Replace) => Err(Status::KeyNotFound),
            (StoreOutcome::NotStored, _) => Err(Status::NotStored),
            (StoreOutcome::Exists, _) => Err(Status::KeyExists),
            // An append or prepend with a CAS unique to a missing key is
            // not stored, as without one.
            (StoreOutcome::NotFound, StoreMode::AppendIfCas(_) | StoreMode::PrependIfCas(_)) => {
                Err(Status::NotStored)
            }
            (StoreOutcome::NotFound, _) => Err(Status::KeyNotFound),
        };
        self.binary_ack(header, answer, quiet);
    }

    /// delete and deleteq; with a CAS unique, only that version.
    fn binary_delete(&mut self, header: &Header, key: &[u8], quiet: bool) {
        let cas = (header.cas != 0).then_some(header.cas);
        let outcome = match self.engine().delete(key, cas) {
            Ok((outcome, ticket)) => {
                self.wrote(ticket);
                outcome
            }
            Err(error) => return self.binary_engine_error(header, &error),
        };
        let answer = match outcome {
            DeleteOutcome::Deleted => {
                self.counts.delete_hits.add(1);
                Ok(0)
            }
            DeleteOutcome::NotFound => {
                self.counts.delete_misses.add(1);
                Err(Status::KeyNotFound)
            }
            DeleteOutcome::Exists => Err(Status::KeyExists),
        };
        self.binary_ack(header, answer, quiet);
    }

    /// increment, decrement and their quiet forms: the counter after it, as
    /// 8 bytes. A miss creates the counter at `initial`, unless the
    /// expiration is `0xffffffff`.
    #[allow(clippy::too_many_arguments)]
    fn binary_arithmetic(
        &mut self,
        header: &Header,
        incr: bool,
        key: &[u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        quiet: bool,
    ) {
        let request = Arith {
            incr,
            delta,
            cas: (header.cas != 0).then_some(header.cas),
            initial: (exptime != u32::MAX).then(|| (initial, self.expiry(exptime))),
            expiry: None,
            read_counter: larder_protocol::parse_counter,
        };
        let outcome = match self.engine().arith(key, request) {
            Ok((outcome, ticket)) => {
                self.wrote(ticket);
                outcome
            }
            Err(error) => return self.binary_engine_error(header, &error),
        };
        self.count_arith(outcome, incr);
        let status = match outcome {
            ArithOutcome::Value { value, cas, .. } => {
                if quiet {
                    return self.ack_quietly();
                }
                let value = value.to_be_bytes();
                return self.ack(|out| {
                    write_response(out, header, Status::Success, cas, &[], &[], &value)
                });
            }
            ArithOutcome::NotFound => Status::KeyNotFound,
            ArithOutcome::Exists => Status::KeyExists,
            ArithOutcome::NonNumeric => Status::NonNumeric,
        };
        self.ack(|out| write_error(out, header, status));
    }

    /// touch: a hit answers the flags and the CAS unique, not the value.
    fn binary_touch(&mut self, header: &Header, key: &[u8], exptime: u32) {
        self.counts.cmd_touch.add(1);
        let expiry = self.expiry(exptime);
        let (found, seen) = match self.engine().touch_item(key, expiry) {
            Ok(found) => found,
            Err(error) => return self.binary_engine_error(header, &error),
        };
        let start = self.output.len();
        match found {
            Some(item) => {
                self.counts.touch_hits.add(1);
                let flags = item.flags.to_be_bytes();
                let cas = item.cas;
                write_response(
                    &mut self.output,
                    header,
                    Status::Success,
                    cas,
                    &flags,
                    &[],
                    &[],
                );
            }
            None => {
                self.counts.touch_misses.add(1);
                write_error(&mut self.output, header, Status::KeyNotFound);
            }
        }
        self.ack_seen(start, seen);
    }

    /// flush and flushq, at once or after a delay.
    fn binary_flush(&mut self, header: &Header, delay: Option<u32>, quiet: bool) {
        self.counts.cmd_flush.add(1);
        let delay_secs = crate::text::flush_delay_secs(delay.map(i64::from), self.now());
        match self.engine().flush_all(delay_secs) {
            Ok(ticket) => self.wrote(ticket),
            Err(error) => return self.binary_engine_error(header, &error),
        }
        self.binary_ack(header, Ok(0), quiet);
    }

    /// stat: a response for each figure, its name as the key and its value
    /// as the value, then one with neither. The group is the key, as in the
    /// text protocol's `stats <group>`; `reset` answers only the last.
    fn binary_stat(&mut self, header: &Header, group: &[u8]) {
        let mut lines = bytes::BytesMut::new();
        // memcached matches these groups by their start in this protocol,
        // and takes `detail on` and `detail off` (Larder keeps no detail:
        // they change nothing).
        let group = match group {
            [] => None,
            _ if group.starts_with(b"settings") => Some(&b"settings"[..]),
            _ if group.starts_with(b"reset") => Some(&b"reset"[..]),
            _ if group.starts_with(b"detail on") || group.starts_with(b"detail off") => {
                return write_response(&mut self.output, header, Status::Success, 0, &[], &[], &[]);
            }
            group => Some(group),
        };
        if !self.write_stats_group(group, &mut lines) {
            return write_error(&mut self.output, header, Status::KeyNotFound);
        }
        for (name, value) in crate::stats::stat_lines(&lines) {
            write_response(
                &mut self.output,
                header,
                Status::Success,
                0,
                &[],
                name,
                value,
            );
        }
        write_response(&mut self.output, header, Status::Success, 0, &[], &[], &[]);
    }
}

#[cfg(test)]
mod tests {
    use crate::session::{Flow, Session, Shared};
    use larder_engine::fs::{FaultKind, MemFs};
    use larder_engine::Durability;
    use larder_protocol::binary::{opcode, parse, write_request, Parsed, HEADER_BYTES};
    use larder_protocol::Limits;

    fn request(code: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
        let mut out = Vec::new();
        write_request(&mut out, code, opaque, 0, extras, key, value);
        out
    }

    /// Handles every request of `input` as one batch.
    fn handle_all(session: &mut Session, mut input: &[u8]) {
        while !input.is_empty() {
            let Ok(Parsed::Complete {
                request,
                frame_bytes,
            }) = parse(input, &Limits::default())
            else {
                panic!("not one whole request");
            };
            assert_eq!(session.handle_binary(&request), Flow::Continue);
            input = &input[frame_bytes..];
        }
    }

    /// The (opcode, status, opaque) of each response in `output`.
    fn responses(mut output: &[u8]) -> Vec<(u8, u16, u32)> {
        let mut out = Vec::new();
        while !output.is_empty() {
            let body = u32::from_be_bytes(output[8..12].try_into().unwrap()) as usize;
            let status = u16::from_be_bytes([output[6], output[7]]);
            let opaque = u32::from_be_bytes(output[12..16].try_into().unwrap());
            out.push((output[1], status, opaque));
            output = &output[HEADER_BYTES + body..];
        }
        out
    }

    #[test]
    fn a_failed_commit_answers_every_write_of_the_batch_in_the_binary_protocol() {
        let fs = MemFs::new();
        let mut session = Session::new(Shared::on_memory(&fs, Durability::Always));
        let extras = [0u8; 8];
        // The quiet miss comes first: a miss waits for the unsynced writes
        // of its keydir partition, and which partition `missing` shares
        // with `a` and `b` changes with the hash's seed.
        let mut input = request(opcode::GETKQ, &[], b"missing", &[], 5);
        input.extend(request(opcode::SETQ, &extras, b"a", b"x", 1));
        input.extend(request(opcode::NOOP, &[], &[], &[], 2));
        input.extend(request(opcode::SET, &extras, b"b", b"y", 3));
        input.extend(request(opcode::GETQ, &[], b"a", &[], 4));
        handle_all(&mut session, &input);
        // The quiet set says nothing, the get of its unsynced value answers.
        assert_eq!(
            responses(&session.output),
            [
                (opcode::NOOP, 0, 2),
                (opcode::SET, 0, 3),
                (opcode::GETQ, 0, 4)
            ]
        );

        fs.inject(FaultKind::EioOnSync);
        let error = session.engine().commit(session.ticket).unwrap_err();
        session.fail_acks(&error);
        // Every answer that depended on the sync is now "Temporary failure",
        // the quiet set's too; the noop is untouched, the quiet miss quiet.
        assert_eq!(
            responses(&session.output),
            [
                (opcode::SETQ, 0x86, 1),
                (opcode::NOOP, 0, 2),
                (opcode::SET, 0x86, 3),
                (opcode::GETQ, 0x86, 4),
            ]
        );
        let text = String::from_utf8_lossy(&session.output);
        assert!(text.contains("write not durable, retry later"), "{text}");
        assert!(!text.contains("SERVER_ERROR"), "{text}");
    }
}
