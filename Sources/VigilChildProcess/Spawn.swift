import CVigilSys
import Glibc

/// How to start one child process: the one spawner of every child Vigil
/// starts (the checker and the probe, which are this executable again, and
/// rules' actions). It is `posix_spawn` with the few choices those children
/// differ in, and the rest always the same:
///
/// - The child's descriptors are the `descriptors` map: each child number
///   gets a copy of a parent descriptor, or /dev/null. Any number goes (a
///   plugin runner gets a socket and a memfd past 2), and a parent number may
///   be one the map also sets (`[1: .parent(2), 2: .parent(2)]`): sources the
///   map would overwrite are first copied above every number in play.
/// - Nothing else is passed on: every descriptor Vigil opens is
///   close-on-exec (`O_CLOEXEC`, `SOCK_CLOEXEC`, `Spawn.pipe`,
///   `Sockets.accept`), and the child closes every descriptor above the
///   map's highest number (glibc's closefrom file action), so one a plugin
///   opened without close-on-exec does not leak either. 0, 1 and 2 are not
///   close-on-exec: one the map leaves out is the parent's own.
/// - Every signal starts at its default disposition, with none blocked,
///   whatever the parent ignores or blocks (the host ignores SIGPIPE; a
///   plugin's thread may block anything). Only glibc's own two (32 and 33)
///   keep what vigil was started with, which posix_spawn cannot change;
///   the fork path for `credentials` resets them too.
package struct Spawn: Sendable {
    /// Where a child's descriptor comes from.
    package enum Source: Sendable, Hashable {
        /// A copy of this descriptor of the parent's.
        case parent(Int32)
        /// /dev/null, open for reading and writing.
        case null
    }

    /// A path, or with `searchPath` a name looked up in PATH (`posix_spawnp`).
    package var program: String
    package var searchPath: Bool
    /// The child's argv, `argv[0]` included.
    package var arguments: [String]
    /// The child's whole environment.
    package var environment: [String: String]
    /// Child descriptor number → where it comes from.
    package var descriptors: [Int32: Source]
    /// Start the child in a process group of its own (its pid is the group's
    /// id), so that a signal to the group also reaches what it started.
    package var newProcessGroup: Bool
    /// Who the child runs as; nil: as the parent does.
    package var credentials: Credentials?

    /// A user, a group and supplementary groups to run a child as (munin's
    /// `user nobody`). Changing them takes root; a child whose change fails
    /// is not run (the start throws, EPERM).
    package struct Credentials: Sendable, Hashable {
        package var uid: uid_t
        package var gid: gid_t
        package var groups: [gid_t]

        package init(uid: uid_t, gid: gid_t, groups: [gid_t]) {
            self.uid = uid
            self.gid = gid
            self.groups = groups
        }
    }

    package init(program: String, searchPath: Bool = false, arguments: [String], environment: [String: String],
         descriptors: [Int32: Source], newProcessGroup: Bool = false, credentials: Credentials? = nil) {
        self.program = program
        self.searchPath = searchPath
        self.arguments = arguments
        self.environment = environment
        self.descriptors = descriptors
        self.newProcessGroup = newProcessGroup
        self.credentials = credentials
    }

    /// Starts the child; returns its pid. The caller reaps it.
    package func start() throws(SpawnError) -> pid_t {
        if let credentials { return try start(as: credentials) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        try addFileActions(&actions)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigfillset(&defaults)
        sigdelset(&defaults, SIGKILL)
        sigdelset(&defaults, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK
        if newProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        let rc = searchPath ? posix_spawnp(&pid, program, &actions, &attributes, argv, envp)
                            : posix_spawn(&pid, program, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw SpawnError(program: program, step: .spawn, code: rc) }
        return pid
    }

    /// The start with other credentials: posix_spawn has no way to change
    /// them, so this is a fork (`vigil_spawn_as`) that does what the spawn
    /// attributes above do, the same descriptor map (a /dev/null source is
    /// opened here, close-on-exec) and then the change. A path only: PATH
    /// is not searched for a program run as someone else.
    private func start(as credentials: Credentials) throws(SpawnError) -> pid_t {
        guard !searchPath || program.contains("/") else { throw SpawnError(program: program, step: .spawn, code: ENOENT) }
        var null: Int32 = -1
        defer { if null >= 0 { close(null) } }
        var sources: [Int32] = []
        var targets: [Int32] = []
        for (child, source) in descriptors.sorted(by: { $0.key < $1.key }) {
            switch source {
            case .parent(let fd):
                sources.append(fd)
            case .null:
                if null < 0 { null = open("/dev/null", O_RDWR | O_CLOEXEC) }
                guard null >= 0 else { throw SpawnError(program: program, step: .descriptors, code: errno) }
                sources.append(null)
            }
            targets.append(child)
        }
        guard sources.count <= 15, sources.allSatisfy({ $0 >= 0 }) else {
            throw SpawnError(program: program, step: .descriptors, code: EBADF)
        }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        let rc = vigil_spawn_as(program, argv, envp, sources, targets, Int32(sources.count), newProcessGroup ? 1 : 0,
                                credentials.uid, credentials.gid, credentials.groups, Int32(clamping: credentials.groups.count), &pid)
        guard rc == 0 else { throw SpawnError(program: program, step: .spawn, code: rc) }
        return pid
    }

    /// The map as file actions. A parent descriptor that the map also sets
    /// is first copied out of the way, onto a number above all in play (what
    /// the child had there was not meant for it anyway), and that copy is
    /// closed last. dup2 clears close-on-exec on what it makes.
    private func addFileActions(_ actions: inout posix_spawn_file_actions_t) throws(SpawnError) {
        let targets = Set(descriptors.keys)
        let inPlay = Array(targets) + descriptors.values.compactMap(\.descriptor)
        var spare = (inPlay.max() ?? 2) + 1
        var sources: [Int32: Int32] = [:]
        for case .parent(let fd) in Set(descriptors.values) where targets.contains(fd) {
            try check(posix_spawn_file_actions_adddup2(&actions, fd, spare))
            sources[fd] = spare
            spare += 1
        }
        for (child, source) in descriptors.sorted(by: { $0.key < $1.key }) {
            switch source {
            case .parent(let fd):
                try check(posix_spawn_file_actions_adddup2(&actions, sources[fd] ?? fd, child))
            case .null:
                try check(posix_spawn_file_actions_addopen(&actions, child, "/dev/null", O_RDWR, 0))
            }
        }
        for copy in sources.values { try check(posix_spawn_file_actions_addclose(&actions, copy)) }
        // Everything above the map is closed in the child, close-on-exec or
        // not: a descriptor a plugin (or a library) opened without it does not
        // reach runners and actions, nor keep a file open for writing in
        // them (a script the host is about to run would fail with ETXTBSY).
        let rc = vigil_spawn_closefrom(&actions, max(2, targets.max() ?? 2) + 1)
        if rc != ENOSYS { try check(rc) }
    }

    private func check(_ rc: Int32) throws(SpawnError) {
        if rc != 0 { throw SpawnError(program: program, step: .descriptors, code: rc) }
    }

    /// A pipe with both ends close-on-exec from the start (`pipe2(O_CLOEXEC)`),
    /// so a child another thread spawns meanwhile cannot inherit them; map an
    /// end into the child to pass it on. `program` is named in the error.
    package static func pipe(for program: String) throws(SpawnError) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        guard vigil_pipe_cloexec(&ends) == 0 else { throw SpawnError(program: program, step: .pipe, code: errno) }
        return (ends[0], ends[1])
    }
}

extension Spawn.Source {
    fileprivate var descriptor: Int32? {
        if case .parent(let fd) = self { fd } else { nil }
    }
}

/// A child that could not be started: which program, at which step, and
/// the errno. Its description reads `/usr/bin/notify: No such file or
/// directory`, or `…: pipe: Too many open files` for a step before the spawn.
package struct SpawnError: Error, CustomStringConvertible, Sendable {
    package enum Step: String, Sendable {
        /// Making a pipe for the child (`Spawn.pipe`).
        case pipe
        /// Turning the descriptor map into file actions (EBADF: a negative number).
        case descriptors = "descriptor map"
        /// posix_spawn itself: the exec failed (ENOENT, EACCES, ENOEXEC…) or the fork did.
        case spawn
    }

    package var program: String
    package var step: Step
    /// The errno.
    package var code: Int32

    package init(program: String, step: Step, code: Int32) {
        self.program = program
        self.step = step
        self.code = code
    }

    /// The errno's text: "No such file or directory".
    package var reason: String { String(cString: strerror(code)) }

    package var description: String {
        step == .spawn ? "\(program): \(reason)" : "\(program): \(step.rawValue): \(reason)"
    }
}
