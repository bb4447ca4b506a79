from deniable.cli.main import main

raise SystemExit(main())
