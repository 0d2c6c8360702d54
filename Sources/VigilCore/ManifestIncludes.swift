/// `include:` — a manifest's monitors, sinks and rules spread over fragment
/// files (`include: ["conf.d/*.yaml"]`), so that a package can drop its
/// monitor into a directory without editing the main file.
///
/// The rules, which docs/manifest.md repeats for users:
///
/// - Patterns are relative to the main manifest's directory, or absolute.
///   Wildcards (`*`, `?`, `[…]`) are allowed in the file name only, the part
///   after the last `/`: a pattern never walks a tree. A wildcard does not
///   match a leading `.` unless the pattern's name starts with one (editors'
///   hidden files are not read). Each pattern's matches are read in byte
///   order of their names; patterns in the order written.
/// - A pattern with wildcards that matches nothing (or whose directory does
///   not exist) is a note, not an error: an empty conf.d is normal. A pattern
///   without wildcards names one file, which must exist.
/// - A fragment holds `monitors:`, `sinks:` and `rules:` only (thresholds
///   are under monitors). Host-wide settings (`host`, `log_level`,
///   `plugin_dirs`, `allow_unsafe_plugins`, `isolation`) belong to the main
///   file: in a fragment each is an error at its key. A fragment's monitors
///   take the main file's top-level `isolation:`.
/// - Includes are one level deep: `include:` in a fragment is an error.
/// - A fragment must be a regular file (a directory, a device, a FIFO is an
///   error at the pattern). One that is empty or only comments is fine.
///   A file matched twice, or the main file matched by a pattern, is read once.
/// - Relative paths inside a fragment (a monitor's `plugin: ./x.so`) are
///   taken from the main manifest's directory, like the main file's.
/// - Names of monitors, sinks and rules are unique across all the files: a
///   name defined twice is an error at both places.
/// - Bounds (`ManifestLimits`): 4MiB a file, 8MiB and 256 fragments in all,
///   4096 names looked at in one directory, file-name patterns of 255 bytes.
struct ManifestPart {
    var file: String
    var keys: Keys
    var location: SourceLocation
}

extension ManifestLoader {
    /// Reads and parses every fragment `manifest.includes` names, in order,
    /// within the limits; records each file read in `manifest.files` and each
    /// directory looked into in `manifest.includeDirectories`.
    func readFragments(from source: any ManifestSource, mainIdentity: String?, mainBytes: Int,
                       into manifest: inout Manifest, _ d: inout Diags) -> [ManifestPart] {
        var parts: [ManifestPart] = []
        var readAs: [String: String] = [:]  // identity → the path it was first read as
        if let mainIdentity { readAs[mainIdentity] = file }
        var bytesRead = mainBytes
        var fragments = 0
        for include in manifest.includes {
            let (pattern, at) = (include.pattern, include.location)
            guard let (directory, name) = split(pattern, at: at, &d) else { continue }
            let names: [String]
            let wildcard = Glob(name).hasMeta
            if wildcard {
                let watched = directory.isEmpty ? "." : directory
                if !manifest.includeDirectories.contains(watched) { manifest.includeDirectories.append(watched) }
                guard let matched = match(name, in: directory, pattern: pattern, at: at, source, &d) else { continue }
                names = matched
            } else {
                names = [name]
            }
            for name in names {
                let path = directory.isEmpty ? name : directory == "/" ? "/" + name : directory + "/" + name
                let matchedBy = wildcard ? " (matched by '\(pattern)')" : ""
                guard fragments < ManifestLimits.maxIncludedFiles else {
                    d.error(at, "'include' brings in more than \(ManifestLimits.maxIncludedFiles) files; \(path)\(matchedBy) and what follows are not read",
                            hint: "narrow the pattern, e.g. conf.d/*.yaml")
                    return parts
                }
                let budget = ManifestLimits.maxTotalBytes - bytesRead
                let limit = min(ManifestLimits.maxFileBytes, budget)
                let read: ManifestSourceFile
                do {
                    read = try source.read(path, limit: limit, fragment: true)
                } catch {
                    let hint: String? = switch error.code {
                    case .isDirectory: wildcard ? "make the pattern match files only, e.g. *.yaml" : "to include the files in it, write \(pattern)/*.yaml"
                    case .notFound where !wildcard: "a pattern without wildcards names one file, which must exist; 'conf.d/*.yaml' may match nothing"
                    default: nil
                    }
                    d.error(at, "cannot include \(path)\(matchedBy): \(error.reason)", hint: hint)
                    continue
                }
                if let first = readAs[read.identity] {
                    let what = first == file ? "the main manifest" : "\(first), already included"
                    d.warning(at, "\(path)\(matchedBy) is \(what); it is read once")
                    continue
                }
                guard read.bytes.count <= limit else {
                    if limit == ManifestLimits.maxFileBytes {
                        d.error(at, "cannot include \(path)\(matchedBy): it is larger than the limit of \(Units.formatSize(Int64(ManifestLimits.maxFileBytes))) a file",
                                hint: "a fragment is a few monitors or sinks; is this the right file?")
                        continue
                    }
                    d.error(at, "cannot include \(path)\(matchedBy): the manifest and its fragments would pass the limit of \(Units.formatSize(Int64(ManifestLimits.maxTotalBytes))) in all; it and what follows are not read")
                    return parts
                }
                readAs[read.identity] = path
                bytesRead += read.bytes.count
                fragments += 1
                manifest.files.append(path)
                if let part = parseFragment(read.bytes, file: path, &d) { parts.append(part) }
            }
        }
        return parts
    }

    /// The pattern's directory (resolved against the main manifest's) and its
    /// file-name part; nil, reported, when the pattern cannot be used.
    private func split(_ pattern: String, at: SourceLocation, _ d: inout Diags) -> (String, String)? {
        guard !pattern.isEmpty else {
            d.error(at, "an 'include' pattern is empty", hint: "include: [\"conf.d/*.yaml\"]")
            return nil
        }
        guard pattern.utf8.count <= ManifestLimits.maxIncludePatternBytes else {
            d.error(at, "an 'include' pattern is \(pattern.utf8.count) bytes; a path is at most \(ManifestLimits.maxIncludePatternBytes)")
            return nil
        }
        guard !pattern.hasSuffix("/") else {
            d.error(at, "'include' pattern '\(pattern)' names a directory; fragments are files",
                    hint: "include: [\"\(pattern)*.yaml\"]")
            return nil
        }
        let base = Manifest(file: file).directory
        let resolved = pattern.hasPrefix("/") || base.isEmpty ? pattern : base + "/" + pattern
        let slash = resolved.lastIndex(of: "/")
        // "" for the working directory: a main manifest given as `vigil.yaml` includes `x.yaml`, not `./x.yaml`
        let directory = slash.map { $0 == resolved.startIndex ? "/" : String(resolved[..<$0]) } ?? ""
        let name = slash.map { String(resolved[resolved.index(after: $0)...]) } ?? resolved
        if Glob(directory).hasMeta {
            d.error(at, "'include' pattern '\(pattern)' has a wildcard before its last '/'; wildcards are allowed in the file name only",
                    hint: "name the directory, e.g. conf.d/*.yaml")
            return nil
        }
        if name == "." || name == ".." {
            d.error(at, "'include' pattern '\(pattern)' names a directory; fragments are files", hint: "include: [\"\(pattern)/*.yaml\"]")
            return nil
        }
        guard name.utf8.count <= ManifestLimits.maxIncludeNamePatternBytes else {
            d.error(at, "the file-name part of 'include' pattern '\(pattern)' is \(name.utf8.count) bytes; a file name is at most \(ManifestLimits.maxIncludeNamePatternBytes)")
            return nil
        }
        return (directory, name)
    }

    /// The names in `directory` that `name` matches, sorted; nil, reported,
    /// when the directory cannot be listed or is too large to look at.
    private func match(_ name: String, in directory: String, pattern: String, at: SourceLocation,
                       _ source: any ManifestSource, _ d: inout Diags) -> [String]? {
        let entries: [String]
        do {
            entries = try source.list(directory.isEmpty ? "." : directory, limit: ManifestLimits.maxIncludeDirectoryEntries)
        } catch {
            if error.code == .notFound {
                d.note(at, "'include' pattern '\(pattern)' matches nothing: there is no directory \(directory.isEmpty ? "." : directory)")
            } else {
                d.error(at, "cannot read the directory \(directory) of 'include' pattern '\(pattern)': \(error.reason)")
            }
            return nil
        }
        guard entries.count <= ManifestLimits.maxIncludeDirectoryEntries else {
            d.error(at, "the directory \(directory) of 'include' pattern '\(pattern)' holds more than \(ManifestLimits.maxIncludeDirectoryEntries) names; an include directory is looked at whole, so it is not read",
                    hint: "keep fragments in a directory of their own, e.g. conf.d/")
            return nil
        }
        let glob = Glob(name)
        let hidden = name.hasPrefix(".")
        let names = entries.filter { (hidden || !$0.hasPrefix(".")) && glob.matches($0) }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        if names.isEmpty {
            d.note(at, "'include' pattern '\(pattern)' matches no file in \(directory.isEmpty ? "." : directory)")
        }
        return names
    }

    /// A fragment's monitors, sinks and rules; nil for one that is empty or
    /// only comments, or that cannot be read as a mapping (reported).
    private func parseFragment(_ bytes: [UInt8], file path: String, _ d: inout Diags) -> ManifestPart? {
        if Self.isBlank(bytes) {
            d.items += bytes.withUnsafeBufferPointer { ManifestText.check($0, file: path) }  // a NUL in a comment is still not text
            return nil
        }
        let (root, problems) = bytes.withUnsafeBufferPointer { ConfigParser(file: path, environment: environment).parse(utf8: $0) }
        d.items += problems
        guard let root else { return nil }
        guard case .mapping(let entries, _) = root else {
            d.error(root.location, "a fragment must be a mapping with 'monitors:', 'sinks:' or 'rules:', not \(root.kindName)")
            return nil
        }
        let keys = Keys(entries, context: "a fragment", known: Self.fragmentKeys)
        for entry in entries where !Self.fragmentKeys.contains(entry.key.text) {
            let key = entry.key.text
            if key == "include" {
                d.error(entry.key.location, "a fragment may not include others: includes are one level deep",
                        hint: "list the pattern in the main manifest \(file)")
            } else if Self.hostWideKeys.contains(key) {
                d.error(entry.key.location, "'\(key)' is a host-wide setting: it belongs in the main manifest \(file), not in a fragment")
            } else {
                d.error(entry.key.location, "unknown key '\(key)' in a fragment",
                        hint: Suggest.hint(for: key, in: Self.fragmentKeys) ?? "a fragment holds \(Self.fragmentKeys.joined(separator: ", "))")
            }
        }
        return ManifestPart(file: path, keys: keys, location: root.location)
    }

    /// Only blanks and comments: nothing to read, and not an error (a
    /// fragment emptied to switch its monitors off).
    static func isBlank(_ bytes: [UInt8]) -> Bool {
        var inComment = false
        for b in bytes {
            switch b {
            case 0x0A, 0x0D: inComment = false
            case 0x20, 0x09: continue
            case UInt8(ascii: "#"): inComment = true
            default: if !inComment { return false }
            }
        }
        return true
    }
}
