import RuleActions
import SystemdBus

/// What systemd's signals have said of one run's unit, and the rules that decide when it is
/// over and how it ended: pure state, no D-Bus, so the rules are tested without systemd
/// (``TransientUnitRun`` feeds it on its thread).
///
/// - The unit is over when systemd removes it (with `CollectMode=inactive-or-failed` it goes
///   right after its last `PropertiesChanged`; `UnitRemoved` alone is no proof — systemd sends
///   it for every unit when it reloads — so the run asks `GetUnit` before it calls ``unitRemoved(_:)``), or
///   reports it `failed`, or `inactive` after it was seen running or its main process was seen to
///   exit — never the `inactive` a new unit reports before its start job ran — and the start
///   job's end (`JobRemoved`) has been heard (or the unit is gone).
/// - The outcome comes from the last values heard: `Result`, `ExecMainCode`, `ExecMainStatus`,
///   and the start job's result.
struct UnitRunState {
    let unit: String
    /// The start job, from `StartTransientUnit`'s reply.
    var jobPath: String?
    /// The start job's result: `done`, or `failed`, `canceled`, `dependency`…
    private(set) var jobResult: String?
    private(set) var removed = false
    private(set) var sawRunning = false
    private(set) var activeState: String?
    private(set) var result: String?
    private(set) var execMainCode: Int?
    private(set) var execMainStatus: Int?
    private(set) var mainPID: Int?

    init(unit: String) {
        self.unit = unit
    }

    /// A `JobRemoved(id, path, unit, result)`. The first job of the unit is its start; a
    /// StopUnit's job comes later, and its result says nothing about how the command ended.
    mutating func jobRemoved(path: String, unit: String, result: String) {
        guard unit == self.unit, path == jobPath || jobPath == nil, jobResult == nil else { return }
        jobResult = result
    }

    /// The connection was lost and made again, and the unit is still there: its start job's
    /// end may have passed unheard. Marked `unseen`: the end then decides alone whether the
    /// command ran (``commandRan``).
    mutating func startJobUnseen() {
        if jobResult == nil { jobResult = "unseen" }
    }

    mutating func unitRemoved(_ name: String) {
        if name == unit { removed = true }
    }

    /// A `PropertiesChanged` of the unit (its Unit or Service interface).
    mutating func propertiesChanged(_ properties: [String: PropertyValue]) {
        if let state = properties["ActiveState"]?.string {
            activeState = state
            if ["activating", "active", "deactivating", "reloading"].contains(state) { sawRunning = true }
        }
        if let value = properties["Result"]?.string { result = value }
        if let value = properties["ExecMainCode"]?.integer { execMainCode = value }
        if let value = properties["ExecMainStatus"]?.integer { execMainStatus = value }
        for key in ["MainPID", "ExecMainPID"] {
            if let pid = properties[key]?.integer, pid > 0 { mainPID = pid }
        }
    }

    var isOver: Bool {
        let ended = removed || activeState == "failed" || (activeState == "inactive" && (sawRunning || (execMainCode ?? 0) != 0))
        return ended && (jobResult != nil || removed)
    }

    /// The start job failed (for a run that may wait a bounded time for the unit's last state).
    var startJobFailed: Bool { jobResult.map { $0 != "done" } ?? false }

    /// How the command ended, once ``isOver`` (or once waiting for it is given up). `stopped`
    /// when the run asked systemd to stop it, whatever systemd says of the end.
    func termination(stopRequested: Bool) -> CommandOutcome.Termination {
        if stopRequested { return .stopped }
        if startJobFailed, !commandRan {
            return .failedToStart("systemd could not start \(unit): job \(jobResult ?? "?")\(failureDetail)")
        }
        switch (result, execMainCode) {
        case ("timeout", _): return .timedOut
        case (_, 1): return .exited(Int32(clamping: execMainStatus ?? 0))
        // CLD_KILLED, CLD_DUMPED: the status is the signal.
        case (_, 2), (_, 3): return .signalled(Int32(clamping: execMainStatus ?? 0))
        case ("success", _): return .exited(0)
        default: return .failedToStart("\(unit) ended without its main process exiting\(failureDetail)")
        }
    }

    /// Whether the command itself ran and ended, even if its start job failed: a command that
    /// exits before systemd saw its execve succeed fails the start job of a `Type=exec` unit,
    /// but its status is its own. systemd's own statuses for a process it could not set up
    /// (200–243, systemd.exec(5)) are a failed start; so a command that itself exits with one of
    /// those that fast is reported as one too.
    var commandRan: Bool {
        switch execMainCode {
        case 1: !(200...243).contains(execMainStatus ?? 0)
        case 2, 3: true
        default: false
        }
    }

    /// `, result exit-code, status 217/USER`: what systemd said of the unit's failure.
    private var failureDetail: String {
        var detail = ""
        if let result { detail += ", result \(result)" }
        if let execMainStatus, execMainCode == 1 {
            detail += ", status \(execMainStatus)" + (Self.exitStatusNames[execMainStatus].map { "/\($0)" } ?? "")
        }
        return detail
    }

    /// systemd's own exit statuses (systemd.exec(5), "Process exit codes") that a rule's command
    /// meets most: the step of setting up the process that failed, before the program ran.
    static let exitStatusNames: [Int: String] = [
        200: "CHDIR", 203: "EXEC", 204: "MEMORY", 209: "STDOUT", 210: "CHROOT", 216: "GROUP", 217: "USER",
        218: "CAPABILITIES", 226: "NAMESPACE", 228: "SECCOMP", 238: "STATE_DIRECTORY",
    ]
}
