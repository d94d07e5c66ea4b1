/// A failure that is not a usage mistake: ArgumentParser prints it as `Error: …` without the
/// usage text and exits with status 1.
struct CommandError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}
