from tidewise.cli import main

raise SystemExit(main())
