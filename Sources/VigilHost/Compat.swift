import VigilABI

/// The host's lock under its former name, until every file says `Lock`.
typealias NSLockish = Lock
