import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// Starting and stopping an exec module's program (docs/modules-any-language.md); its crashes,
/// restarts and held mailbox are the supervisor's as for a worker. On the supervisor's queue.
extension WorkerSupervisor {
    /// Spawns the program, makes the config's subscriptions (taking over those held since a
    /// crash), sends the `hello` line and lets the mailbox go on. Nothing is waited for: a
    /// program answers nothing, and one that cannot start ends at once, which is a crash.
    func startExec(_ exec: ExecSettings, format: ExecLineFormat) -> StartOutcome {
        let program: ExecProcess
        do {
            program = try ExecProcess.spawn(program: exec.program, name: configuration.name, settings: configuration.settings,
                                            worker: configuration.executable)
        } catch {
            return .failed(error.description)
        }
        let worker = forwarding.beginWorker()
        let session = WorkerSession(program: program, settings: exec, format: format, subscriptions: execSubscriptions,
                                    name: configuration.name, hostBus: bus,
                                    forwarding: forwarding, worker: worker, log: log) { [weak self] session, reason in
            guard let self else { return }
            self.queue.async { self.sessionEnded(session, reason: reason) }
        }
        let link = session.exec!
        session.start()
        // Its standard input ends with it; what it wrote before is read, then a child it left
        // holding its output cannot keep the session open.
        program.process.watchExit { [channel = session.channel] in
            channel.close()
            link.programEnded(grace: .seconds(1))
        }
        for subscription in exec.subscriptions {
            do {
                try session.subscribeExec(subscription, link)
            } catch {
                log.error("the host could not subscribe for the module (\(subscription)): \(error)")
            }
        }
        let hello: JSON = [
            "type": "hello",
            "protocol": .int(Int64(ExecSettings.protocolVersion)),
            "module": .string(configuration.name),
            "config": configuration.config.json,
            "subscriptions": .array(exec.subscriptions.map { .string($0.description) }),
        ]
        session.channel.send { $0.append(.start, json: hello) }
        setSession(session)
        lastHandover = forwarding.attach(session, worker: worker, retiring: false)
        let name = (exec.program[0] as NSString).lastPathComponent
        state.withLock {
            $0.reportedName = name
            $0.version = "exec"
            $0.restarting = false
        }
        return .activated(reportedName: name, version: "exec")
    }

    /// What waits in the mailbox goes to the program, then its input ends (end of file: a
    /// program that reads to its end finishes by itself); a program still running after a
    /// moment (at most a second, half the time there is) gets SIGTERM, and at `deadline`
    /// SIGKILL, with its whole process group.
    func stopExec(_ session: WorkerSession, deadline: ContinuousClock.Instant) -> StopOutcome {
        let drained = DispatchSemaphore(value: 0)
        mailbox.perform { [forwarding] in
            forwarding.flushNow()
            drained.signal()
        }
        func remaining() -> Duration { max(.zero, deadline - .now) }
        if !session.readerEnded {
            _ = drained.wait(timeout: .now() + DispatchTimeInterval(remaining()))
        }
        session.channel.flushAndClose(timeout: remaining() / 2)
        let process = session.process
        let polite = ContinuousClock.now + min(.seconds(1), remaining() / 2)
        while !process.hasEnded, ContinuousClock.now < polite { System.sleep(for: .milliseconds(2)) }
        if !process.hasEnded { try? System.sendSignal(SIGTERM, toGroup: process.pid) }
        while !process.hasEnded, ContinuousClock.now < deadline { System.sleep(for: .milliseconds(2)) }
        let ended = process.hasEnded
        end(session)
        let exit = process.reap(within: .zero)
        let lost = loseWhatItHeld(session)
        session.channel.closeDescriptor()
        if ended {
            log.info("program ended: \(exit)")
            return .deactivated
        }
        return .timedOut(lost: lost)
    }
}
