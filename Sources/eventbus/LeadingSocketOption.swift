/// `eventbus --socket PATH tail …`: the socket named before the subcommand, as `systemctl -H`
/// or `docker -H` users write it. ArgumentParser only takes an option after the subcommand that
/// declares it, so the leading option is moved behind the subcommand's name. Anything else is
/// left as it is, for the parser to accept or explain.
enum LeadingSocketOption {
    static func reordered(_ arguments: [String]) -> [String] {
        var leading: [String] = []
        var rest = arguments[...]
        while let first = rest.first {
            if first == "--socket", rest.count >= 2 {
                leading += rest.prefix(2)
                rest = rest.dropFirst(2)
            } else if first.hasPrefix("--socket=") {
                leading.append(first)
                rest = rest.dropFirst()
            } else {
                break
            }
        }
        guard !leading.isEmpty, let subcommand = rest.first, !subcommand.hasPrefix("-") else { return arguments }
        return [subcommand] + leading + rest.dropFirst()
    }
}
