import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `--mode exec`: the worker becomes an exec module's program (`execv`), having set for it what
/// it sets for itself — the death signal, resource limits, OOM score — since a program in any
/// language cannot be asked to.
///
/// Why through the worker rather than a `posix_spawn` of the program: `posix_spawn` cannot set
/// resource limits or a death signal in the child, and setting limits from the host after the
/// spawn (`prlimit`) leaves the program running unlimited for a moment. `PR_SET_PDEATHSIG` and
/// resource limits survive `execv`; the signals the worker ignores (SIGINT, SIGTERM, SIGHUP,
/// SIGPIPE) would survive too, so they are reset first: the host stops an exec module with
/// SIGTERM, and a program writing to a closed pipe should end as it would anywhere else.
enum ExecMode {
    static func become(_ program: [String]) -> Never {
        guard let path = program.first else { fail("--mode exec needs the program after --", status: 64) }
        for reset in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { signal(reset, SIG_DFL) }
        var argv: [UnsafeMutablePointer<CChar>?] = program.map { strdup($0) } + [nil]
        execv(path, &argv)
        // Standard error is the host's log of this module.
        fail("cannot run \(path): \(String(cString: strerror(errno)))", status: 127)
    }
}
