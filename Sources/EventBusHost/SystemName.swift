import SystemCalls

/// The OS boundary (the SystemCalls target) under its one name, `System`, in every file of the
/// host: files that add their own calls to it (`extension System`) need not import the target.
typealias System = SystemCalls.System
